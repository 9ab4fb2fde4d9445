//! The breaking-change check of the OpenAPI document: what a client written against the older
//! document may meet in the newer one. No maintained tool fits (oasdiff is Go and reads OpenAPI
//! 3.1 only in part, openapi-diff is Java or 3.0 only), so this is a focused checker of the
//! changes the API's lifecycle promises not to make:
//!
//! - a removed path or operation;
//! - a parameter removed, newly required, or of a changed type;
//! - a request body newly required; a request field removed, newly required, or of a changed
//!   type; an enum value removed from what a client may send;
//! - a response field removed or of a changed type; an enum value removed from what it reads
//!   (its code may switch on it).
//!
//! An operation the older document marks `deprecated: true` may change or go: deprecation is
//! the warning. Schemas are compared through their `$ref`s, `allOf`s (merged), `oneOf`/`anyOf`
//! variants (by position) and array items; a type may widen where the client sends it and
//! narrow where it reads it, never the other way.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

const METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/// Which way a schema's values travel: what a client sends, or what it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Request,
    Response,
}

/// The breaking changes from `old` to `new`, each a line naming where it is.
pub fn breaking_changes(old: &Value, new: &Value) -> Vec<String> {
    let mut check = Check { old, new, found: Vec::new(), seen: BTreeSet::new() };
    let empty = serde_json::Map::new();
    let new_paths = new["paths"].as_object().unwrap_or(&empty);
    for (path, old_item) in old["paths"].as_object().unwrap_or(&empty) {
        for method in METHODS {
            let Some(old_op) = old_item.get(method) else { continue };
            if old_op["deprecated"] == Value::Bool(true) {
                continue;
            }
            let at = format!("{} {path}", method.to_uppercase());
            match new_paths.get(path).and_then(|item| item.get(method)) {
                None => check.found.push(format!("{at}: removed")),
                Some(new_op) => check.operation(&at, path, old_op, new_op),
            }
        }
    }
    check.found
}

struct Check<'a> {
    old: &'a Value,
    new: &'a Value,
    found: Vec<String>,
    /// Pairs of schemas (by `$ref`) compared already, each way: a schema's changes are told once
    /// (where it is first met), and recursive schemas end.
    seen: BTreeSet<(String, String, bool)>,
}

impl Check<'_> {
    fn operation(&mut self, at: &str, path: &str, old: &Value, new: &Value) {
        // A "path" parameter its path has no `{name}` for was never one a client could send: an
        // error of the document, which a later one may correct by naming where it really goes
        // (the query). It is compared as that.
        let placed = |p: &Value, fixes: Option<&BTreeMap<(String, String), Value>>| {
            let (place, name) = (p["in"].as_str().unwrap_or(""), p["name"].as_str().unwrap_or(""));
            let phantom = place == "path" && !path.contains(&format!("{{{name}}}"));
            let corrected = fixes.is_some_and(|new| new.contains_key(&("query".to_owned(), name.to_owned())));
            let place = if phantom && corrected { "query" } else { place };
            (place.to_owned(), name.to_owned())
        };
        let params =
            |op: &Value, fixes: Option<&BTreeMap<(String, String), Value>>| -> BTreeMap<(String, String), Value> {
                op["parameters"].as_array().into_iter().flatten().map(|p| (placed(p, fixes), p.clone())).collect()
            };
        let new_params = params(new, None);
        let old_params = params(old, Some(&new_params));
        for ((place, name), old_param) in &old_params {
            let here = format!("{at}: {place} parameter {name}");
            match new_params.get(&(place.clone(), name.clone())) {
                None => self.found.push(format!("{here}: removed")),
                Some(new_param) => {
                    if is_required(new_param) && !is_required(old_param) {
                        self.found.push(format!("{here}: now required"));
                    }
                    // A parameter is there or not: `null` is no value it can have.
                    let (old_schema, new_schema) =
                        (without_null(&old_param["schema"]), without_null(&new_param["schema"]));
                    self.schema(&here, &old_schema, &new_schema, Direction::Request);
                }
            }
        }
        for ((place, name), new_param) in &new_params {
            if is_required(new_param) && !old_params.contains_key(&(place.clone(), name.clone())) {
                self.found.push(format!("{at}: {place} parameter {name}: new and required"));
            }
        }

        let (old_body, new_body) = (&old["requestBody"], &new["requestBody"]);
        if is_required(new_body) && !is_required(old_body) {
            self.found.push(format!("{at}: request body: now required"));
        }
        for (media, old_content) in old_body["content"].as_object().into_iter().flatten() {
            let here = format!("{at}: request body ({media})");
            match new_body["content"].get(media) {
                None if !new_body.is_null() => self.found.push(format!("{here}: no longer accepted")),
                None => self.found.push(format!("{here}: removed")),
                // Raw bytes are what the client has, whatever the schema says of them.
                Some(_) if !is_json(media) => {}
                Some(new_content) => {
                    self.schema(&here, &old_content["schema"], &new_content["schema"], Direction::Request);
                }
            }
        }

        for (status, old_response) in old["responses"].as_object().into_iter().flatten() {
            let Some(new_response) = new["responses"].get(status) else { continue };
            for (media, old_content) in old_response["content"].as_object().into_iter().flatten() {
                let here = format!("{at}: {status} response ({media})");
                match new_response["content"].get(media) {
                    None => self.found.push(format!("{here}: no longer sent")),
                    Some(new_content) => {
                        self.schema(&here, &old_content["schema"], &new_content["schema"], Direction::Response);
                    }
                }
            }
        }
    }

    /// Compares a schema where it is used (`at`), resolving references.
    fn schema(&mut self, at: &str, old: &Value, new: &Value, direction: Direction) {
        let (old_ref, new_ref) = (old["$ref"].as_str(), new["$ref"].as_str());
        if old_ref.is_some() || new_ref.is_some() {
            let key =
                (old_ref.unwrap_or("").to_owned(), new_ref.unwrap_or("").to_owned(), direction == Direction::Request);
            if !self.seen.insert(key) {
                return;
            }
        }
        let old = merged(self.old, old);
        let new = merged(self.new, new);

        let (old_types, new_types) = (types(&old), types(&new));
        if !old_types.is_empty() && !new_types.is_empty() {
            let breaks = match direction {
                // Whatever the client sent must still be taken.
                Direction::Request => !old_types.is_subset(&new_types),
                // Whatever the server sends now the client must know.
                Direction::Response => !new_types.is_subset(&old_types),
            };
            if breaks {
                self.found.push(format!("{at}: type {} became {}", join(&old_types), join(&new_types)));
            }
        }

        if let (Some(old_enum), Some(new_enum)) = (old["enum"].as_array(), new["enum"].as_array()) {
            for value in old_enum.iter().filter(|v| !new_enum.contains(v)) {
                self.found.push(format!("{at}: enum value {value} removed"));
            }
        }

        let old_props = old["properties"].as_object();
        let new_props = new["properties"].as_object();
        if let Some(old_props) = old_props {
            let empty = serde_json::Map::new();
            let new_props = new_props.unwrap_or(&empty);
            for (name, old_prop) in old_props {
                let here = format!("{at}: field {name}");
                match new_props.get(name) {
                    None => self.found.push(format!("{here}: removed")),
                    Some(new_prop) => self.schema(&here, old_prop, new_prop, direction),
                }
            }
        }
        if direction == Direction::Request {
            let old_required = names(&old["required"]);
            for name in names(&new["required"]).difference(&old_required) {
                self.found.push(format!("{at}: field {name}: now required"));
            }
        }

        if !old["items"].is_null() && !new["items"].is_null() {
            self.schema(&format!("{at}[]"), &old["items"], &new["items"], direction);
        }
        if let (Some(old_map), Some(new_map)) =
            (old["additionalProperties"].as_object(), new["additionalProperties"].as_object())
        {
            let (old_map, new_map) = (Value::Object(old_map.clone()), Value::Object(new_map.clone()));
            self.schema(&format!("{at}{{}}"), &old_map, &new_map, direction);
        }
        for variants in ["oneOf", "anyOf"] {
            let (Some(old_variants), Some(new_variants)) = (old[variants].as_array(), new[variants].as_array()) else {
                continue;
            };
            if direction == Direction::Request && new_variants.len() < old_variants.len() {
                self.found.push(format!("{at}: {variants} lost variants"));
            }
            for (i, (old_variant, new_variant)) in old_variants.iter().zip(new_variants).enumerate() {
                self.schema(&format!("{at} ({variants} {i})"), old_variant, new_variant, direction);
            }
        }
    }
}

/// `schema` with its `$ref` followed and its `allOf` parts merged into one object.
fn merged(document: &Value, schema: &Value) -> Value {
    let mut schema = resolve(document, schema);
    let Some(parts) = schema.get("allOf").and_then(Value::as_array).cloned() else { return schema };
    let object = schema.as_object_mut().expect("a schema with allOf is an object");
    object.remove("allOf");
    for part in parts {
        let part = merged(document, &part);
        for (key, value) in part.as_object().into_iter().flatten() {
            match (key.as_str(), object.get_mut(key)) {
                ("properties", Some(Value::Object(props))) => {
                    props.extend(value.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), v.clone())));
                }
                ("required", Some(Value::Array(required))) => {
                    required.extend(value.as_array().into_iter().flatten().cloned())
                }
                (_, Some(_)) => {}
                (_, None) => {
                    object.insert(key.clone(), value.clone());
                }
            }
        }
    }
    schema
}

/// `schema` with its `$ref` (into this document's components) followed, as many times as needed.
fn resolve(document: &Value, schema: &Value) -> Value {
    let mut schema = schema.clone();
    for _ in 0..16 {
        let Some(reference) = schema["$ref"].as_str() else { break };
        let Some(target) = reference.strip_prefix('#').map(|pointer| document.pointer(pointer)) else { break };
        let Some(target) = target else { break };
        // Siblings of `$ref` (a description) matter not; the target is the schema.
        schema = target.clone();
    }
    schema
}

/// The schema's types (`type` as a string or a list; `nullable: true` adds null).
fn types(schema: &Value) -> BTreeSet<String> {
    let mut types: BTreeSet<String> = match &schema["type"] {
        Value::String(one) => [one.clone()].into(),
        Value::Array(many) => many.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect(),
        _ => BTreeSet::new(),
    };
    if schema["nullable"] == Value::Bool(true) {
        types.insert("null".into());
    }
    // An integer is a number where a number was.
    if types.contains("number") {
        types.insert("integer".into());
    }
    types
}

fn names(list: &Value) -> BTreeSet<String> {
    list.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
}

/// `schema` without `null` among its types.
fn without_null(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(types) = schema.get_mut("type").and_then(Value::as_array_mut) {
        types.retain(|t| t != "null");
    }
    schema
}

/// Whether a media type's bodies are JSON (`application/json`, `application/problem+json`…),
/// whose schema says what a client sends or reads; of other bodies (raw bytes) it only describes.
fn is_json(media: &str) -> bool {
    let essence = media.split(';').next().unwrap_or(media).trim();
    essence == "application/json" || essence.ends_with("+json")
}

fn is_required(item: &Value) -> bool {
    item["required"] == Value::Bool(true)
}

fn join(types: &BTreeSet<String>) -> String {
    types.iter().cloned().collect::<Vec<_>>().join("|")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::breaking_changes;

    /// A small document: a mission read and created, a listing with a filter.
    fn document() -> serde_json::Value {
        json!({
            "openapi": "3.1.0",
            "paths": {
                "/missions": {
                    "get": {
                        "parameters": [{"in": "query", "name": "name", "required": false, "schema": {"type": "string"}}],
                        "responses": {"200": {"content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Mission"}}}}}}
                    },
                    "post": {
                        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Create"}}}},
                        "responses": {"201": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Mission"}}}}}
                    }
                },
                "/missions/{id}": {
                    "delete": {"deprecated": true, "responses": {"204": {"description": "gone"}}}
                }
            },
            "components": {"schemas": {
                "Mission": {"type": "object", "required": ["id"], "properties": {
                    "id": {"type": "string"},
                    "status": {"$ref": "#/components/schemas/Status"},
                    "parent": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/Mission"}]},
                    "size": {"type": "integer"}
                }},
                "Status": {"type": "string", "enum": ["new", "done"]},
                "Create": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"},
                    "status": {"$ref": "#/components/schemas/Status"},
                    "size": {"type": ["integer", "null"]}
                }}
            }}
        })
    }

    fn changed(change: impl FnOnce(&mut serde_json::Value)) -> Vec<String> {
        let old = document();
        let mut new = old.clone();
        change(&mut new);
        breaking_changes(&old, &new)
    }

    #[test]
    fn the_same_document_and_additions_break_nothing() {
        assert_eq!(changed(|_| {}), Vec::<String>::new());
        let added = changed(|d| {
            d["paths"]["/stations"] = json!({"get": {"responses": {}}});
            d["components"]["schemas"]["Mission"]["properties"]["labels"] = json!({"type": "object"});
            d["components"]["schemas"]["Create"]["properties"]["labels"] = json!({"type": "object"});
            d["paths"]["/missions"]["get"]["parameters"]
                .as_array_mut()
                .unwrap()
                .push(json!({"in": "query", "name": "label", "schema": {"type": "string"}}));
            // A request field may take more than it did.
            d["components"]["schemas"]["Create"]["properties"]["name"]["type"] = json!(["string", "null"]);
        });
        assert_eq!(added, Vec::<String>::new());
    }

    #[test]
    fn a_documented_path_parameter_the_path_lacks_may_move_to_the_query_and_raw_bodies_may_say_bytes() {
        let mut old = document();
        old["paths"]["/missions"]["post"] = json!({
            "parameters": [{"in": "path", "name": "label", "required": true, "schema": {"type": "string"}}],
            "requestBody": {"content": {"application/octet-stream":
                {"schema": {"type": "array", "items": {"type": "integer"}}}}},
            "responses": {}
        });
        let mut new = old.clone();
        new["paths"]["/missions"]["post"]["parameters"][0]["in"] = json!("query");
        new["paths"]["/missions"]["post"]["requestBody"]["content"]["application/octet-stream"]["schema"] =
            json!({"type": "string", "format": "binary"});
        assert_eq!(breaking_changes(&old, &new), Vec::<String>::new());
        // A real path parameter may not move, nor a query one appear from nowhere.
        let mut elsewhere = new.clone();
        elsewhere["paths"]["/missions"]["post"]["parameters"][0]["name"] = json!("other");
        assert_eq!(
            breaking_changes(&old, &elsewhere),
            [
                "POST /missions: path parameter label: removed",
                "POST /missions: query parameter other: new and required"
            ]
        );
    }

    #[test]
    fn removals_are_caught() {
        let removed = changed(|d| {
            d["paths"]["/missions"].as_object_mut().unwrap().remove("post");
        });
        assert_eq!(removed, ["POST /missions: removed"]);
        let removed = changed(|d| {
            d["components"]["schemas"]["Mission"]["properties"].as_object_mut().unwrap().remove("size");
        });
        assert_eq!(removed, ["GET /missions: 200 response (application/json)[]: field size: removed"]);
        let removed = changed(|d| {
            d["components"]["schemas"]["Status"]["enum"] = json!(["new"]);
        });
        assert!(
            removed.contains(
                &"POST /missions: request body (application/json): field status: enum value \"done\" removed"
                    .to_owned()
            ),
            "{removed:?}"
        );
        assert!(
            removed.contains(
                &"GET /missions: 200 response (application/json)[]: field status: enum value \"done\" removed"
                    .to_owned()
            ),
            "{removed:?}"
        );
        let removed = changed(|d| {
            d["paths"]["/missions"]["get"]["parameters"] = json!([]);
        });
        assert_eq!(removed, ["GET /missions: query parameter name: removed"]);
    }

    #[test]
    fn new_requirements_and_changed_types_are_caught() {
        let required = changed(|d| {
            d["paths"]["/missions"]["get"]["parameters"]
                .as_array_mut()
                .unwrap()
                .push(json!({"in": "query", "name": "owner", "required": true, "schema": {"type": "string"}}));
            d["components"]["schemas"]["Create"]["required"] = json!(["name", "size"]);
        });
        assert_eq!(
            required,
            [
                "GET /missions: query parameter owner: new and required",
                "POST /missions: request body (application/json): field size: now required",
            ]
        );
        let retyped = changed(|d| {
            d["components"]["schemas"]["Mission"]["properties"]["size"]["type"] = json!("string");
        });
        assert_eq!(
            retyped,
            ["GET /missions: 200 response (application/json)[]: field size: type integer became string"]
        );
        // A response field that may now be null breaks a client that reads it as a number.
        let nullable = changed(|d| {
            d["components"]["schemas"]["Mission"]["properties"]["size"]["type"] = json!(["integer", "null"]);
        });
        assert_eq!(
            nullable,
            ["GET /missions: 200 response (application/json)[]: field size: type integer became integer|null"]
        );
        // A request field that takes less than it did.
        let narrowed = changed(|d| {
            d["components"]["schemas"]["Create"]["properties"]["size"]["type"] = json!("integer");
        });
        assert_eq!(
            narrowed,
            ["POST /missions: request body (application/json): field size: type integer|null became integer"]
        );
    }

    #[test]
    fn a_deprecated_operation_may_go_and_recursive_schemas_end() {
        let gone = changed(|d| {
            d["paths"].as_object_mut().unwrap().remove("/missions/{id}");
        });
        assert_eq!(gone, Vec::<String>::new());
        // Mission.parent refers to Mission: the comparison ends.
        let deep = changed(|d| {
            d["components"]["schemas"]["Mission"]["properties"]["id"]["type"] = json!("integer");
        });
        assert!(deep.iter().any(|c| c.ends_with("field id: type string became integer")), "{deep:?}");
    }
}
