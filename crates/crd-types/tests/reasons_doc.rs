//! docs/status-conditions.md lists every condition type and reason the operator writes; this
//! keeps that table equal to the reason enums of `crd_types::conditions::reasons`.

use crd_types::conditions::reasons;

fn rendered() -> String {
    let mut out = String::from("| condition type | reason | meaning |\n|---|---|---|\n");
    for (type_, reason, meaning) in reasons::table() {
        out.push_str(&format!("| `{type_}` | `{reason}` | {meaning} |\n"));
    }
    out
}

#[test]
fn the_conditions_page_lists_every_reason() {
    // Run time, not env!: a target directory shared by two checkouts keeps the first one's.
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo test");
    let path = format!("{dir}/../../docs/status-conditions.md");
    let page = std::fs::read_to_string(path).expect("docs/status-conditions.md");
    let table = rendered();
    assert!(
        page.contains(&table),
        "docs/status-conditions.md must contain this table exactly (generated from the reason \
         enums; paste it over the old one):\n\n{table}"
    );
}
