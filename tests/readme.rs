//! The README's Rust examples are doc tests (`src/lib.rs` includes the README under
//! `cfg(doctest)`), but rustdoc compiles only the fences it takes for Rust: a block fenced
//! ```` ```rs ````, ```` ```rust,ignore ```` or ```` ```text ```` around Rust is silently left
//! out. These tests read the README's fences and fail on any that would not be compiled, or
//! that hide lines the way rustdoc does (the README is read on forges that show them).

use std::path::Path;

/// Languages of fences that are not Rust: rustdoc leaves them alone.
const NOT_RUST: &[&str] = &[
    "sh", "bash", "console", "text", "toml", "json", "sql", "http", "yaml", "python",
];

/// Attributes a compiled Rust fence may carry (`ignore` is not one: it skips compilation).
const COMPILED: &[&str] = &["rust", "no_run", "should_panic", "edition2021"];

/// A fence: its 1-based line and its info string.
struct Fence {
    line: usize,
    info: String,
    body: Vec<String>,
}

fn fences(markdown: &str) -> Vec<Fence> {
    let mut found = Vec::new();
    let mut open: Option<Fence> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            match open.take() {
                Some(fence) => found.push(fence),
                None => {
                    open = Some(Fence {
                        line: index + 1,
                        info: info.trim().to_owned(),
                        body: Vec::new(),
                    })
                }
            }
        } else if let Some(fence) = open.as_mut() {
            fence.body.push(line.to_owned());
        }
    }
    assert!(open.is_none(), "README.md ends inside a code block");
    found
}

/// Why rustdoc would not compile this fence as a Rust test, or `None` if it would (or if it
/// is not Rust at all).
fn problem(fence: &Fence) -> Option<String> {
    let attributes: Vec<&str> = fence
        .info
        .split([',', ' '])
        .map(str::trim)
        .filter(|attribute| !attribute.is_empty())
        .collect();
    let Some(&language) = attributes.first() else {
        return Some("a fence without a language: name it (`rust`, `sh`, `text`, ...)".to_owned());
    };
    if NOT_RUST.contains(&language) {
        let looks_like_rust = fence.body.iter().any(|line| {
            let line = line.trim_start();
            line.starts_with("use slot_booking")
                || line.starts_with("let ")
                || line.starts_with("fn ")
                || line.starts_with("async fn ")
        });
        return looks_like_rust.then(|| {
            format!("Rust code fenced as `{language}`, so never compiled: fence it `rust`")
        });
    }
    if language != "rust" {
        return Some(format!(
            "fenced `{}`, which rustdoc does not compile: fence Rust as `rust` (or `rust,no_run` \
             when it needs a database), anything else as one of {NOT_RUST:?}",
            fence.info
        ));
    }
    if let Some(other) = attributes.iter().find(|a| !COMPILED.contains(a)) {
        return Some(format!(
            "`{other}` in `{}`: a README example must be compiled (attributes allowed: \
             {COMPILED:?})",
            fence.info
        ));
    }
    let hidden = fence
        .body
        .iter()
        .find(|line| matches!(line.trim_start(), "#") || line.trim_start().starts_with("# "));
    hidden.map(|line| {
        format!("the hidden line {line:?}: forges show it; write the example out in full")
    })
}

fn readme() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn every_rust_block_in_the_readme_is_a_doc_test() {
    let readme = readme();
    let fences = fences(&readme);
    let problems: Vec<String> = fences
        .iter()
        .filter_map(|fence| problem(fence).map(|why| format!("README.md:{}: {why}", fence.line)))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let compiled = fences.iter().filter(|f| f.info.starts_with("rust")).count();
    assert!(
        compiled >= 6,
        "only {compiled} Rust blocks found in the README"
    );
}

#[test]
fn the_readme_is_included_as_doc_tests() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let included = lib.split("#[cfg(doctest)]").skip(1).any(|after| {
        after
            .trim_start()
            .starts_with("#[doc = include_str!(\"../README.md\")]")
    });
    assert!(
        included,
        "src/lib.rs no longer includes README.md under #[cfg(doctest)]"
    );
    assert!(
        lib.contains("#![doc(test(attr(deny(unused_must_use))))]"),
        "doc tests no longer refuse a dropped Follower or Reclaimer"
    );
}

#[test]
fn the_checks_catch_what_they_are_for() {
    let sample = "\
```rs
let a = 1;
```

```rust,ignore
let b = 2;
```

```text
use slot_booking::MemoryStore;
```

```rust
# let hidden = 3;
```

```rust,no_run
let fine = 4;
```

```sh
cargo test
```
";
    let found: Vec<Option<String>> = fences(sample).iter().map(problem).collect();
    assert_eq!(found.len(), 6);
    assert!(found[..4].iter().all(Option::is_some), "{found:?}");
    assert!(found[4..].iter().all(Option::is_none), "{found:?}");
}
