//! The book documents every option each parser accepts: an option without a line on its
//! entrypoint's page fails here, so a new flag cannot land undocumented. The pages name an
//! option in backticks (`` `--boot-device` ``, `` `--boot-device <path>` ``, `` `--role=…` ``).

use clap::{Args, CommandFactory};
use std::path::PathBuf;

use super::{go_flags, live_install, Cli};
use crate::config::KernelOptions;
use crate::write::args::WriterArgs;

fn page(name: &str) -> (PathBuf, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("docs/src")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading the book page {}: {e}", path.display()));
    (path, text)
}

/// Whether `text` names `word` in backticks: `` `word` `` or `` `word <value>` ``, `` `word=…` ``,
/// `` `word, -x` ``; not as the start of a longer name (`--image` in `--image-url`).
fn named_in_backticks(text: &str, word: &str) -> bool {
    let needle = format!("`{word}");
    text.match_indices(&needle).any(|(at, _)| {
        let next = text[at + needle.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    })
}

/// Fails with every word `page_name` does not name, and where to add it.
fn assert_documented(page_name: &str, what: &str, words: Vec<String>) {
    assert!(!words.is_empty(), "no {what} found to check");
    let (path, text) = page(page_name);
    let missing: Vec<&String> = words
        .iter()
        .filter(|w| !named_in_backticks(&text, w))
        .collect();
    assert!(
        missing.is_empty(),
        "{} has no line for these {what}: {missing:?}; add each, in backticks, with what it \
         does (the book documents every option)",
        path.display()
    );
}

/// The long options of a clap command, without clap's own `--help`/`--version`.
fn long_options(command: &clap::Command) -> Vec<String> {
    command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|long| !matches!(*long, "help" | "version"))
        .map(|long| format!("--{long}"))
        .collect()
}

fn subcommand(name: &str) -> clap::Command {
    let mut cli = Cli::command();
    cli.build();
    cli.find_subcommand(name)
        .unwrap_or_else(|| panic!("no subcommand {name}"))
        .clone()
}

#[test]
fn docs_every_installer_flag_has_a_line_on_the_installer_page() {
    let flags = go_flags::flags().map(|(name, _)| format!("--{name}"));
    assert_documented("installer.md", "installer flags", flags.collect());
}

#[test]
fn docs_every_installer_args_option_has_a_line_on_the_installer_page() {
    let command = WriterArgs::augment_args(clap::Command::new("--installer-args"));
    assert_documented(
        "installer.md",
        "--installer-args options",
        long_options(&command),
    );
}

#[test]
fn docs_every_write_image_option_has_a_line_on_its_page() {
    let mut options = long_options(&subcommand("write-image"));
    options.push("--verbose".into());
    assert_documented("write-image.md", "write-image options", options);
}

#[test]
fn docs_every_coreos_inst_kernel_argument_has_a_line_on_the_write_image_page() {
    let keys = live_install::keys().map(|k| format!("coreos.inst.{k}"));
    assert_documented(
        "write-image.md",
        "coreos.inst.* kernel arguments",
        keys.collect(),
    );
}

#[test]
fn docs_every_embed_option_has_a_line_on_its_page() {
    let options = long_options(&subcommand("embed"));
    assert_documented("embed.md", "embed options", options);
}

#[test]
fn docs_every_ai_kernel_argument_has_a_line_on_its_page() {
    let keys = KernelOptions::KEYS.iter().map(|k| k.to_string());
    assert_documented(
        "kernel-arguments.md",
        "ai.* kernel arguments",
        keys.collect(),
    );
}

#[test]
fn docs_an_option_is_not_found_inside_a_longer_one() {
    let text = "| `--image-url <url>` | … | `--copy-network`, `-n` |";
    assert!(named_in_backticks(text, "--image-url"));
    assert!(named_in_backticks(text, "--copy-network"));
    assert!(!named_in_backticks(text, "--image"));
    assert!(!named_in_backticks(text, "--network"));
    assert!(!named_in_backticks(
        "--image-url without backticks",
        "--image-url"
    ));
}
