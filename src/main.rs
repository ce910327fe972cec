//! Thin entrypoint: logging, argument parsing, dispatch, one error message, exit code.

use clap::Parser;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use assisted_installer::cli::{self, Cli, Command};
use assisted_installer::image::{progress, Cancel, Interrupted};
use assisted_installer::{commands, logging, signals};

/// Subcommands are parsed with clap; anything else is the installer entrypoint with the Go
/// installer's flags, exactly as the assisted-service agent runs it.
const SUBCOMMANDS: &[&str] = &["write-image", "embed", "controller"];

fn main() -> ExitCode {
    // The controller's Job runs the image's entrypoint without arguments; the image also has
    // the binary under the controller's name (Go's entrypoint paths). The agent always passes
    // the installer its flags, so a run without any argument is the controller.
    if commands::controller::is_controller_invocation(std::env::args_os()) {
        return fail_or_ok(commands::controller::run());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args
        .first()
        .is_some_and(|a| SUBCOMMANDS.contains(&a.as_str()))
    {
        return ExitCode::from(commands::install::run(&args).clamp(0, 255) as u8);
    }
    let args_after_binary = args;
    let cli = Cli::parse();
    match cli.command {
        // The controller sets up its own log (stdout and its log file).
        Command::Controller => fail_or_ok(commands::controller::run()),
        Command::WriteImage(args) => {
            logging::init(cli.verbose);
            // Config files and kernel arguments add options: parsed again with them.
            let args = match cli::config_sources::resolve(args, &args_after_binary) {
                Ok(args) => args,
                Err(e) => return fail(&e, 1),
            };
            let stop = Cancel::new();
            let signal = match signals::cancel_on_signal(&stop) {
                Ok(s) => s,
                Err(e) => return fail(&e, 1),
            };
            let bar = progress::for_stderr();
            match commands::write_image::run(&args, bar.as_ref(), &stop) {
                Ok(summary) => {
                    println!("{summary}");
                    if let Some(rss) = commands::write_image::peak_rss_bytes() {
                        println!("peak memory: {:.1} MiB", rss as f64 / 1048576.0);
                    }
                    if let (true, Some(device)) = (args.kexec, &args.device) {
                        let loader = assisted_installer::kexec::SyscallLoader;
                        if let Some(loaded) = commands::write_image::load_for_kexec(device, &loader)
                        {
                            println!("{loaded}");
                        }
                    }
                    ExitCode::SUCCESS
                }
                Err(e) if e.chain().any(|c| c.is::<Interrupted>()) => {
                    let sig = signal.load(Ordering::SeqCst);
                    fail(&e, 128 + sig.clamp(1, 127) as u8)
                }
                Err(e) => fail(&e, 1),
            }
        }
        Command::Embed(args) => {
            logging::init(cli.verbose);
            fail_or_ok(commands::embed::run(&args))
        }
    }
}

fn fail_or_ok(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e, 1),
    }
}

fn fail(e: &anyhow::Error, code: u8) -> ExitCode {
    eprintln!("error: {e:#}");
    ExitCode::from(code)
}
