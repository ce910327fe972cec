//! The documents stay true to the repository: the README, ARCHITECTURE.md and the book (docs/)
//! link only to files and headings that exist, name only paths that exist, ARCHITECTURE.md's
//! code map names every module, and the book's summary reaches every page. (That every option
//! has a line in the book is checked next to the parsers: `cargo test --lib docs_`.)

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const BOOK: &str = "docs/src";

/// What one Markdown file says, as far as these checks go.
#[derive(Default)]
struct Document {
    /// Link and image targets, as written.
    links: Vec<String>,
    /// The anchors its headings get (GitHub's and mdBook's slugs; repeats numbered `-1`, `-2`).
    anchors: BTreeSet<String>,
    /// Words in code spans and in code blocks (mermaid diagrams aside).
    code_words: Vec<String>,
}

/// The anchor a heading gets: lower case, spaces to `-`, punctuation other than `-` and `_`
/// dropped (as GitHub and mdBook make them).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_lowercase().next()?),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

fn read(relative: &str) -> Document {
    let path = root().join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    parse(&text)
}

fn parse(text: &str) -> Document {
    let mut doc = Document::default();
    let mut heading: Option<String> = None;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut in_block: Option<bool> = None; // Some(is a diagram)
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                doc.links.push(dest_url.to_string())
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                doc.anchors.insert(match *n {
                    0 => base.clone(),
                    k => format!("{base}-{k}"),
                });
                *n += 1;
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let diagram =
                    matches!(&kind, CodeBlockKind::Fenced(lang) if lang.as_ref() == "mermaid");
                in_block = Some(diagram);
            }
            Event::End(TagEnd::CodeBlock) => in_block = None,
            Event::Text(t) if heading.is_some() => heading.as_mut().unwrap().push_str(&t),
            Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
                doc.code_words
                    .extend(t.split_whitespace().map(str::to_string))
            }
            Event::Text(t) if in_block == Some(false) => doc
                .code_words
                .extend(t.split_whitespace().map(str::to_string)),
            _ => {}
        }
    }
    doc
}

/// The Markdown files under the book's source, relative to the repository.
fn book_pages() -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(root().join(BOOK))
        .expect("docs/src")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("{BOOK}/{name}"))
        .collect();
    pages.sort();
    pages
}

/// The README, ARCHITECTURE.md and the book's pages, each read once, by repository path.
fn documents() -> BTreeMap<String, Document> {
    let mut all = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    all.extend(book_pages());
    all.into_iter()
        .map(|path| {
            let doc = read(&path);
            (path, doc)
        })
        .collect()
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with the relative link `target` in the document `from`, if anything; the
/// anchors of `docs` are used, another Markdown file's are read.
fn broken(from: &str, target: &str, docs: &BTreeMap<String, Document>) -> Option<String> {
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (target, None),
    };
    let resolved = if file.is_empty() {
        PathBuf::from(from)
    } else {
        normalize(&Path::new(from).parent().unwrap().join(file))
    };
    if from.starts_with(BOOK) && !resolved.starts_with(BOOK) {
        return Some(format!(
            "leaves the book ({}), so it breaks in the built book: name the file in backticks",
            resolved.display()
        ));
    }
    if !root().join(&resolved).exists() {
        return Some(format!("{} does not exist", resolved.display()));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if resolved.extension().is_some_and(|e| e == "md") {
        let path = resolved.to_str().unwrap();
        let other;
        let anchors = match docs.get(path) {
            Some(doc) => &doc.anchors,
            None => {
                other = read(path);
                &other.anchors
            }
        };
        if !anchors.contains(anchor) {
            return Some(format!(
                "{} has no heading with the anchor #{anchor}",
                resolved.display()
            ));
        }
    }
    None
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

#[test]
fn every_relative_link_reaches_a_file_and_heading_that_exist() {
    let mut failures = Vec::new();
    let docs = documents();
    for (from, doc) in &docs {
        for target in &doc.links {
            if is_external(target) {
                continue;
            }
            if let Some(why) = broken(from, target, &docs) {
                failures.push(format!("{from}: ({target}) {why}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "broken links:\n{}",
        failures.join("\n")
    );
}

/// Files at the repository's root that documents name.
const ROOT_FILES: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "Dockerfile",
    "Makefile",
    "README.md",
    "ARCHITECTURE.md",
];
const TOP_DIRS: &[&str] = &[
    "src/",
    "tests/",
    "benches/",
    "testdata/",
    "scripts/",
    "docs/",
    ".ci/",
];

/// The repository path a code word names, if it names one: `src/disk/holders.rs`,
/// `tests/common/`, `Makefile`; not a placeholder (`testdata/fuzz/<target>/`) or a pattern.
fn repository_path(word: &str) -> Option<&str> {
    let word = word.trim_end_matches("'s");
    let word = word.trim_end_matches([',', '.', ';', ':', ')']);
    let word = word.trim_start_matches('(');
    let path_like = TOP_DIRS.iter().any(|d| word.starts_with(d)) || ROOT_FILES.contains(&word);
    let placeholder = word.contains(['<', '{', '*', '$', '…']);
    (path_like && !placeholder).then_some(word)
}

#[test]
fn every_path_a_document_names_exists() {
    let mut failures = Vec::new();
    for (from, doc) in documents() {
        for word in &doc.code_words {
            if let Some(path) = repository_path(word) {
                let path = path.split_once(':').map_or(path, |(p, _)| p);
                if !root().join(path).exists() {
                    failures.push(format!("{from}: `{path}` does not exist"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "paths named that do not exist (renamed or removed? update the document):\n{}",
        failures.join("\n")
    );
}

/// Every directory under `src/` and every file directly in it, as `src/…` paths.
fn modules() -> Vec<String> {
    fn walk(dir: &Path, relative: &str, top: bool, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = format!("{relative}{name}");
            if entry.file_type().unwrap().is_dir() {
                out.push(format!("{path}/"));
                walk(&entry.path(), &format!("{path}/"), false, out);
            } else if top {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join("src"), "src/", true, &mut out);
    out.sort();
    out
}

#[test]
fn the_code_map_names_every_module() {
    let named: BTreeSet<String> = read("ARCHITECTURE.md")
        .code_words
        .iter()
        .filter_map(|w| repository_path(w))
        .map(|p| p.trim_end_matches('/').to_string())
        .collect();
    let missing: Vec<String> = modules()
        .into_iter()
        .filter(|m| !named.contains(m.trim_end_matches('/')))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name these (say what each owns, in backticks): {missing:?}"
    );
}

#[test]
fn the_summary_reaches_every_page_of_the_book() {
    let summary = read(&format!("{BOOK}/SUMMARY.md"));
    let linked: BTreeSet<String> = summary
        .links
        .iter()
        .map(|l| format!("{BOOK}/{}", l.split('#').next().unwrap()))
        .collect();
    let missing: Vec<String> = book_pages()
        .into_iter()
        .filter(|p| !p.ends_with("/SUMMARY.md") && !linked.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "pages the book's summary (docs/src/SUMMARY.md) does not list, so the built book leaves \
         them out: {missing:?}"
    );
}

#[test]
fn the_checks_see_what_they_must() {
    let doc = parse(
        "# Title\n## What happens to the disk, in order\n## `--kexec` and `ai.kexec`\n\
         ## Title\nSee [x](other.md#a-b) and ![d](d.svg), `src/disk/` and `Makefile,`.\n\
         ### `src/wire.rs`\n`scripts/image.sh offline`, `Dockerfile`'s\n\
         ```\nsrc/main.rs   thin\n```\n```mermaid\nflowchart LR\n  src/nowhere --> b\n```\n",
    );
    assert_eq!(doc.links, ["other.md#a-b", "d.svg"]);
    for anchor in [
        "title",
        "title-1",
        "what-happens-to-the-disk-in-order",
        "--kexec-and-aikexec",
    ] {
        assert!(doc.anchors.contains(anchor), "{anchor}: {:?}", doc.anchors);
    }
    let paths: Vec<&str> = doc
        .code_words
        .iter()
        .filter_map(|w| repository_path(w))
        .collect();
    assert_eq!(
        paths,
        [
            "src/disk/",
            "Makefile",
            "src/wire.rs",
            "scripts/image.sh",
            "Dockerfile",
            "src/main.rs"
        ]
    );
    assert_eq!(repository_path("testdata/fuzz/<target>/"), None);
    let no_docs = BTreeMap::new();
    assert!(broken("docs/src/a.md", "../../src/main.rs", &no_docs)
        .unwrap()
        .contains("leaves the book"));
    assert!(broken("README.md", "docs/src/nowhere.md", &no_docs).is_some());
    assert!(broken("README.md", "Makefile", &no_docs).is_none());
    assert!(modules().contains(&"src/disk/".to_string()));
    assert!(modules().contains(&"src/main.rs".to_string()));
}
