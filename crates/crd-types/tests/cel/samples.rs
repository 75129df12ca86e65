//! The samples in deploy/samples.

use super::*;

/// Every sample in deploy/samples deserializes into its type and passes admission.
#[test]
fn samples_are_admitted() {
    // Run time, not env!: a target directory shared by two checkouts keeps the first one's.
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo test");
    let dir = std::path::Path::new(&crate_dir).join("../../deploy/samples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() == "kustomization.yaml" {
            continue;
        }
        let object: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let found = match object["kind"].as_str().unwrap() {
            "ValkeyNode" => {
                serde_json::from_value::<ValkeyNode>(object.clone()).unwrap();
                violations::<ValkeyNode>(&object, None)
            }
            "ValkeyCluster" => {
                serde_json::from_value::<ValkeyCluster>(object.clone()).unwrap();
                violations::<ValkeyCluster>(&object, None)
            }
            "ValkeyReplication" => {
                serde_json::from_value::<ValkeyReplication>(object.clone()).unwrap();
                violations::<ValkeyReplication>(&object, None)
            }
            other => panic!("{}: unexpected kind {other}", path.display()),
        };
        assert!(found.is_empty(), "{}: {found:?}", path.display());
        checked += 1;
    }
    assert!(checked >= 4, "expected the four samples, checked {checked}");
}
