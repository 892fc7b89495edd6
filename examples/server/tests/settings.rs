//! The settings as documented are the settings as read: the README's table and the `server`
//! example's table list exactly [`SETTINGS`], in order, with the same flags and defaults, and
//! `--help` shows each with its variable and default (the help's content is checked in
//! `config`'s unit tests, the binary's answers in `process.rs`).

use slot_booking_server::config::SETTINGS;

/// (variable, flag, default) of every row of the first settings table in `text`, whose lines
/// start with `prefix` (`| \`` follows it).
fn table(text: &str, prefix: &str) -> Vec<(String, String, String)> {
    let cell = |cell: &str| cell.trim().trim_matches('`').to_owned();
    text.lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .skip_while(|line| !line.starts_with("| variable | flag | default |"))
        .skip(2)
        .take_while(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_start_matches('|').splitn(4, " | ").collect();
            assert_eq!(cells.len(), 4, "{line}");
            (cell(cells[0]), cell(cells[1]), cell(cells[2]))
        })
        .collect()
}

fn expected() -> Vec<(String, String, String)> {
    SETTINGS
        .iter()
        .map(|s| {
            (
                s.variable.to_owned(),
                format!("--{}", s.flag),
                s.default.unwrap_or("none").to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_readme_table_lists_every_setting_with_its_flag_and_default() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));
    let section = readme
        .split("\n## The example server\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README has a section \"## The example server\"");
    assert_eq!(table(section, ""), expected());
}

#[test]
fn the_server_examples_table_lists_every_setting_with_its_flag_and_default() {
    let example = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../server.rs"));
    assert_eq!(table(example, "//! "), expected());
}
