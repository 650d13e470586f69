//! The schema against the decoder's keys, and against a real JSON Schema validator's view.

use super::*;

use crate::decode::Keyword;

fn keys(v: &serde_json::Value, def: &str) -> Vec<String> {
    let props = if def.is_empty() {
        &v["properties"]
    } else {
        &v["definitions"][def]["properties"]
    };
    let mut k: Vec<String> = props.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

fn sorted(k: &[&str]) -> Vec<String> {
    let mut k: Vec<String> = k.iter().map(|s| s.to_string()).collect();
    k.sort();
    k
}

#[test]
fn schema_keys_match_the_decoder() {
    let v: serde_json::Value = serde_json::from_str(&json_schema()).unwrap();
    assert_eq!(v["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(keys(&v, ""), sorted(crate::document::KEYS));
    assert_eq!(
        keys(&v, "Run"),
        sorted(&crate::run::keys::names().collect::<Vec<_>>())
    );
    assert_eq!(keys(&v, "Model"), sorted(crate::model::KEYS));
    let closed: Vec<&str> = v["definitions"]["Model"]["then"]["propertyNames"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(sorted(&closed), sorted(crate::model::KEYS));
    assert_eq!(keys(&v, "Mesh"), sorted(crate::mesh::KEYS));
    assert_eq!(keys(&v, "Engine"), sorted(crate::engine::KEYS));
    assert_eq!(keys(&v, "Variant"), sorted(crate::variant::KEYS));
    assert_eq!(keys(&v, "Executor"), sorted(crate::executor::KEYS));
    assert_eq!(
        keys(&v, "EngineArtifacts"),
        sorted(crate::engine::ARTIFACT_KEYS)
    );
    assert_eq!(
        keys(&v, "EngineMutationTable"),
        sorted(crate::engine::MUTATION_KEYS)
    );
    assert_eq!(
        keys(&v, "EngineShrink"),
        sorted(&crate::engine_shrink::SHRINKABLE)
    );
    assert_eq!(keys(&v, "MatrixEntry"), sorted(crate::matrix::KEYS));
    assert_eq!(keys(&v, "Exclude"), sorted(crate::matrix::EXCLUDE_KEYS));
    assert_eq!(keys(&v, "Mutations"), sorted(crate::mutation::KEYS));
    let mut limit_keys: Vec<&str> = crate::level::Level::ALL
        .iter()
        .flat_map(|(_, l)| crate::tolerance::limit_keys(*l).iter().copied())
        .collect();
    limit_keys.sort();
    limit_keys.dedup();
    assert_eq!(keys(&v, "Limits"), sorted(&limit_keys));
}
