//! The CustomResourceDefinitions, as written to deploy/crds by `crdgen`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::{ValkeyCluster, ValkeyNode, ValkeyReplication};

/// Every CRD with the file name it is committed under in deploy/crds.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("valkeynodes.yaml", unwrapped(ValkeyNode::crd())),
        ("valkeyclusters.yaml", unwrapped(ValkeyCluster::crd())),
        (
            "valkeyreplications.yaml",
            unwrapped(ValkeyReplication::crd()),
        ),
    ]
}

/// Joins the hard line wraps of doc comments inside each description, keeping paragraph
/// breaks, so `kubectl explain` reflows the text instead of breaking mid-sentence.
fn unwrapped(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut value = serde_json::to_value(&crd).expect("a CRD serializes");
    unwrap_descriptions(&mut value);
    serde_json::from_value(value).expect("only descriptions changed")
}

fn unwrap_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                match child {
                    Value::String(text) if key == "description" => *text = unwrap_lines(text),
                    _ => unwrap_descriptions(child),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

fn unwrap_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| {
            paragraph
                .split('\n')
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_join_and_paragraphs_stay() {
        assert_eq!(unwrap_lines("one\ntwo\n\nthree"), "one two\n\nthree");
    }

    #[test]
    fn no_description_keeps_a_single_line_break() {
        for (file, crd) in all() {
            let mut found = Vec::new();
            collect(&serde_json::to_value(&crd).unwrap(), &mut found);
            let wrapped: Vec<_> = found
                .iter()
                .filter(|d| d.replace("\n\n", "").contains('\n'))
                .collect();
            assert!(wrapped.is_empty(), "{file}: {wrapped:?}");
        }
    }

    fn collect(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    match child {
                        Value::String(text) if key == "description" => out.push(text.clone()),
                        _ => collect(child, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|i| collect(i, out)),
            _ => {}
        }
    }
}
