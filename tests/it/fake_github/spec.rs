//! GitHub's official OpenAPI description (`@octokit/openapi`, pinned in
//! `tests/forge-fixtures/package.json`) for the fake GitHub: loaded once per process, operations
//! found by method and path template, OpenAPI 3.0 schemas turned into JSON Schema (draft 4) and
//! compiled once per operation, and every request's parameters and body checked against them.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use jsonschema::{Draft, Validator};
use serde_json::{Map, Value, json};

/// The folder `scripts/test` installs the npm fixtures into.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../tests/forge-fixtures/node_modules")
}

/// The loaded description: the document, its operations and the compiled schemas.
pub struct Spec {
    doc: Value,
    ops: Vec<Op>,
    /// Compiled schemas by `"{operationId} {what}"`; `None` when a schema failed to compile
    /// (reported once as a problem by `compile`).
    validators: Mutex<HashMap<String, Option<Arc<Validator>>>>,
    /// How long reading and indexing the description took.
    pub load_time: Duration,
}

/// One operation: a method on a path template.
pub struct Op {
    /// Upper case, as on the wire.
    pub method: String,
    /// As the description writes it, e.g. `/repos/{owner}/{repo}/issues/{issue_number}`.
    pub template: String,
    pub id: String,
    /// GitHub's documentation page for it (what its errors name as `documentation_url`).
    pub docs_url: String,
    segments: Vec<Segment>,
}

enum Segment {
    Literal(String),
    /// A parameter; `multi` (`x-multi-segment`, e.g. a commit ref `heads/main`) takes one or more
    /// segments.
    Param {
        name: String,
        multi: bool,
    },
}

/// What routing a request found.
pub enum Route<'a> {
    Found(&'a Op, BTreeMap<String, String>),
    /// The path exists, not with this method: these are its methods.
    WrongMethod(Vec<String>),
    NotFound,
}

static SPEC: OnceLock<Spec> = OnceLock::new();

/// The description, read on first use.
pub fn spec() -> &'static Spec {
    SPEC.get_or_init(Spec::load)
}

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

impl Spec {
    fn load() -> Spec {
        let started = Instant::now();
        let path = fixtures_dir().join("@octokit/openapi/generated/api.github.com.json");
        let bytes = std::fs::read(&path).unwrap_or_else(|error| {
            panic!(
                "fake GitHub: cannot read GitHub's OpenAPI description {} ({error}); \
                 `scripts/test` installs tests/forge-fixtures (or run \
                 `cd tests/forge-fixtures && npm ci`)",
                path.display()
            )
        });
        let doc: Value = serde_json::from_slice(&bytes).unwrap();
        let mut ops = Vec::new();
        for (template, item) in doc["paths"].as_object().unwrap() {
            for method in METHODS {
                let Some(op) = item.get(method) else { continue };
                let params = Self::params_of(&doc, item, op);
                let segments = template
                    .trim_start_matches('/')
                    .split('/')
                    .map(|segment| match segment.strip_prefix('{') {
                        Some(name) => {
                            let name = name.trim_end_matches('}').to_owned();
                            let multi = params.iter().any(|p| {
                                p["name"] == name.as_str()
                                    && p["in"] == "path"
                                    && p["x-multi-segment"] == true
                            });
                            Segment::Param { name, multi }
                        }
                        None => Segment::Literal(segment.to_owned()),
                    })
                    .collect();
                ops.push(Op {
                    method: method.to_ascii_uppercase(),
                    template: template.clone(),
                    id: op["operationId"].as_str().unwrap_or_default().to_owned(),
                    docs_url: op["externalDocs"]["url"]
                        .as_str()
                        .unwrap_or("https://docs.github.com/rest")
                        .to_owned(),
                    segments,
                });
            }
        }
        Spec {
            doc,
            ops,
            validators: Mutex::new(HashMap::new()),
            load_time: started.elapsed(),
        }
    }

    /// The value a local `$ref` (`#/components/...`) points at.
    pub fn resolve<'a>(&'a self, value: &'a Value) -> &'a Value {
        resolve_in(&self.doc, value)
    }

    /// `#/components/examples/{name}`'s value.
    pub fn example(&self, name: &str) -> Value {
        let example = &self.doc["components"]["examples"][name]["value"];
        assert!(
            !example.is_null(),
            "fake GitHub: no example {name} in the description"
        );
        example.clone()
    }

    fn operation(&self, op: &Op) -> &Value {
        &self.doc["paths"][&op.template][op.method.to_ascii_lowercase()]
    }

    /// The operation with this id.
    pub fn op(&self, id: &str) -> &Op {
        self.ops
            .iter()
            .find(|op| op.id == id)
            .unwrap_or_else(|| panic!("fake GitHub: no operation {id}"))
    }

    /// The parameters of an operation: its path item's, overridden by its own, `$ref`s resolved.
    fn params_of(doc: &Value, item: &Value, op: &Value) -> Vec<Value> {
        let mut params: Vec<Value> = Vec::new();
        for list in [&item["parameters"], &op["parameters"]] {
            for param in list.as_array().into_iter().flatten() {
                let param = resolve_in(doc, param).clone();
                params.retain(|p| p["name"] != param["name"] || p["in"] != param["in"]);
                params.push(param);
            }
        }
        params
    }

    fn params(&self, op: &Op) -> Vec<Value> {
        Self::params_of(
            &self.doc,
            &self.doc["paths"][&op.template],
            self.operation(op),
        )
    }

    /// The operation a method and (percent-encoded) path name, with the path's parameters
    /// (decoded). Where several templates match, the one with the most literal segments wins
    /// (`/issues/comments` over `/issues/{issue_number}`).
    pub fn route(&self, method: &str, path: &str) -> Route<'_> {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let mut best: Option<(usize, &Op, BTreeMap<String, String>)> = None;
        let mut methods = Vec::new();
        for op in &self.ops {
            let mut params = BTreeMap::new();
            if !match_segments(&op.segments, &segments, &mut params) {
                continue;
            }
            if op.method != method {
                methods.push(op.method.clone());
                continue;
            }
            let literals = op
                .segments
                .iter()
                .filter(|s| matches!(s, Segment::Literal(_)))
                .count();
            if best.as_ref().is_none_or(|(score, _, _)| literals > *score) {
                best = Some((literals, op, params));
            }
        }
        match best {
            Some((_, op, params)) => Route::Found(op, params),
            None if methods.is_empty() => Route::NotFound,
            None => {
                methods.sort();
                methods.dedup();
                Route::WrongMethod(methods)
            }
        }
    }

    /// Problems with a request's path parameters (first) and query parameters, against the
    /// operation's parameter schemas. `path_bad` is set when a path parameter is invalid (GitHub
    /// answers those 404).
    pub fn check_params(
        &self,
        op: &Op,
        path_params: &BTreeMap<String, String>,
        query: &[(String, String)],
        path_bad: &mut bool,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let params = self.params(op);
        for (name, value) in path_params {
            let Some(param) = params
                .iter()
                .find(|p| p["in"] == "path" && p["name"] == *name)
            else {
                continue;
            };
            let instance = coerce(value, &param["schema"]);
            let before = problems.len();
            self.validate(
                &format!("{} path:{name}", op.id),
                &param["schema"],
                &instance,
                &format!("path parameter `{name}`={value:?}"),
                &mut problems,
            );
            if problems.len() > before {
                *path_bad = true;
            }
        }
        let mut seen: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, value) in query {
            seen.entry(name.trim_end_matches("[]"))
                .or_default()
                .push(value);
        }
        for (name, values) in &seen {
            let Some(param) = params
                .iter()
                .find(|p| p["in"] == "query" && p["name"] == *name)
            else {
                let known: Vec<&str> = params
                    .iter()
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| p["name"].as_str())
                    .collect();
                problems.push(format!(
                    "unknown query parameter `{name}` for {} {} ({}): it takes {}",
                    op.method,
                    op.template,
                    op.id,
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ));
                continue;
            };
            let schema = &param["schema"];
            let instance = if self.resolve(schema)["type"] == "array" {
                let items = &self.resolve(schema)["items"];
                Value::Array(
                    values
                        .iter()
                        .flat_map(|v| v.split(','))
                        .map(|v| coerce(v, items))
                        .collect(),
                )
            } else {
                if values.len() > 1 {
                    problems.push(format!(
                        "query parameter `{name}` given {} times ({values:?})",
                        values.len()
                    ));
                }
                coerce(values[0], schema)
            };
            self.validate(
                &format!("{} query:{name}", op.id),
                schema,
                &instance,
                &format!("query parameter `{name}`={:?}", values.join(",")),
                &mut problems,
            );
            if *name == "per_page"
                && let Some(n) = instance.as_i64()
                && !(1..=100).contains(&n)
            {
                problems.push(format!(
                    "query parameter `per_page`={n}: GitHub takes 1 to 100 (it silently answers \
                     at most 100)"
                ));
            }
        }
        for param in &params {
            if param["in"] == "query"
                && param["required"] == true
                && let Some(name) = param["name"].as_str()
                && !seen.contains_key(name)
            {
                problems.push(format!("required query parameter `{name}` is missing"));
            }
        }
        problems
    }

    /// Problems with a request's JSON body (`None`: no body) against the operation's
    /// `application/json` request body schema. Properties the schema does not name are problems
    /// too (GitHub ignores them; a client sending one has a typo or a wrong idea).
    pub fn check_body(&self, op: &Op, body: Option<&Value>) -> Vec<String> {
        let mut problems = Vec::new();
        let request_body = self.resolve(&self.operation(op)["requestBody"]);
        let schema = &request_body["content"]["application/json"]["schema"];
        match body {
            None if request_body["required"] == true => problems.push(format!(
                "{} {} ({}) needs a JSON body and got none",
                op.method, op.template, op.id
            )),
            None => {}
            Some(_) if schema.is_null() => problems.push(format!(
                "{} {} ({}) takes no request body",
                op.method, op.template, op.id
            )),
            Some(body) => {
                self.validate(
                    &format!("{} body", op.id),
                    schema,
                    body,
                    "request body",
                    &mut problems,
                );
                let schema = self.resolve(schema);
                if let (Some(properties), Some(object)) =
                    (schema["properties"].as_object(), body.as_object())
                    && schema.get("additionalProperties").is_none()
                {
                    for key in object.keys() {
                        if !properties.contains_key(key) {
                            problems.push(format!(
                                "request body: unknown property `{key}` (the description names {})",
                                properties.keys().cloned().collect::<Vec<_>>().join(", ")
                            ));
                        }
                    }
                }
            }
        }
        problems
    }

    /// Problems with an answer the fake gave (its own bugs, not the client's): the body against
    /// the operation's response schema for that status, when it has one.
    pub fn check_response(&self, op: &Op, status: u16, body: &Value) -> Vec<String> {
        let responses = &self.operation(op)["responses"];
        let response = self.resolve(&responses[status.to_string()]);
        let schema = &response["content"]["application/json"]["schema"];
        let mut problems = Vec::new();
        if !schema.is_null() {
            self.validate(
                &format!("{} response:{status}", op.id),
                schema,
                body,
                &format!("the fake's {status} answer to {}", op.id),
                &mut problems,
            );
        }
        problems
    }

    /// The first 2xx example of an operation's answer: its status and value.
    pub fn answer_example(&self, op: &Op) -> Option<(u16, Option<Value>)> {
        let responses = self.operation(op)["responses"].as_object()?;
        let (status, response) = responses.iter().find(|(s, _)| s.starts_with('2'))?;
        let status: u16 = status.parse().ok()?;
        let response = self.resolve(response);
        let examples = &response["content"]["application/json"]["examples"];
        let example = examples
            .as_object()
            .and_then(|e| e.values().next())
            .map(|e| self.resolve(e))
            .map(|e| self.resolve(&e["value"]).clone());
        Some((status, example))
    }

    fn validate(
        &self,
        key: &str,
        schema: &Value,
        instance: &Value,
        what: &str,
        problems: &mut Vec<String>,
    ) {
        let Some(validator) = self.compile(key, schema, problems) else {
            return;
        };
        for error in validator.iter_errors(instance) {
            let at = error.instance_path().as_str().to_owned();
            let at = if at.is_empty() {
                String::new()
            } else {
                format!(" at {at}")
            };
            problems.push(format!("{what}{at}: {error}"));
        }
    }

    fn compile(
        &self,
        key: &str,
        schema: &Value,
        problems: &mut Vec<String>,
    ) -> Option<Arc<Validator>> {
        if let Some(compiled) = self.validators.lock().unwrap().get(key) {
            return compiled.clone();
        }
        let converted = to_json_schema(&self.doc, schema, &mut Vec::new());
        let compiled = match jsonschema::options()
            .with_draft(Draft::Draft4)
            .should_validate_formats(true)
            .should_ignore_unknown_formats(true)
            .build(&converted)
        {
            Ok(validator) => Some(Arc::new(validator)),
            Err(error) => {
                problems.push(format!(
                    "fake GitHub: the description's schema for {key} does not compile: {error}"
                ));
                None
            }
        };
        self.validators
            .lock()
            .unwrap()
            .insert(key.to_owned(), compiled.clone());
        compiled
    }
}

fn resolve_in<'a>(doc: &'a Value, mut value: &'a Value) -> &'a Value {
    for _ in 0..16 {
        let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
            return value;
        };
        let pointer = reference.strip_prefix('#').unwrap_or_else(|| {
            panic!("fake GitHub: the description has a non-local $ref {reference}")
        });
        value = doc.pointer(pointer).unwrap_or_else(|| {
            panic!("fake GitHub: the description's $ref {reference} leads nowhere")
        });
    }
    panic!("fake GitHub: $ref chain too long at {value}")
}

fn match_segments(
    template: &[Segment],
    path: &[&str],
    params: &mut BTreeMap<String, String>,
) -> bool {
    let Some((first, rest)) = template.split_first() else {
        return path.is_empty();
    };
    match first {
        Segment::Literal(literal) => {
            path.first() == Some(&literal.as_str()) && match_segments(rest, &path[1..], params)
        }
        Segment::Param { name, multi } => {
            let most = if *multi {
                path.len()
            } else {
                path.len().min(1)
            };
            for take in (1..=most).rev() {
                let taken = &path[..take];
                if taken.iter().any(|s| s.is_empty()) {
                    continue;
                }
                if match_segments(rest, &path[take..], params) {
                    params.insert(name.clone(), percent_decode(&taken.join("/"), false));
                    return true;
                }
            }
            false
        }
    }
}

/// `%XX` decoded (and `+` as a space, in a query string).
pub fn percent_decode(text: &str, plus_is_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' if plus_is_space => out.push(b' '),
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A query string's `name=value` pairs, decoded.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name, true), percent_decode(value, true))
        })
        .collect()
}

/// A parameter's text as the JSON value its schema's type reads it as (left a string where it
/// does not parse, so that validation names the mismatch).
fn coerce(text: &str, schema: &Value) -> Value {
    let kind = schema["type"].as_str().unwrap_or_default();
    match kind {
        "integer" => text
            .parse::<i64>()
            .map_or_else(|_| json!(text), Value::from),
        "number" => text
            .parse::<f64>()
            .ok()
            .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
            .unwrap_or_else(|| json!(text)),
        "boolean" => match text {
            "true" => json!(true),
            "false" => json!(false),
            _ => json!(text),
        },
        "string" => json!(text),
        _ => text
            .parse::<i64>()
            .map_or_else(|_| json!(text), Value::from),
    }
}

/// Keywords of OpenAPI's schema object that JSON Schema does not have (or that only annotate).
const OPENAPI_ONLY: [&str; 10] = [
    "example",
    "examples",
    "discriminator",
    "readOnly",
    "writeOnly",
    "deprecated",
    "externalDocs",
    "xml",
    "description",
    "title",
];

/// An OpenAPI 3.0 schema as JSON Schema (draft 4): `$ref`s inlined (a `$ref` to a schema already
/// being inlined, a cycle, becomes `{}`), `nullable: true` admits `null`, OpenAPI's own keywords
/// and `x-*` extensions dropped.
pub fn to_json_schema(doc: &Value, schema: &Value, stack: &mut Vec<String>) -> Value {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        if stack.iter().any(|r| r == reference) {
            return json!({});
        }
        stack.push(reference.to_owned());
        let converted = to_json_schema(doc, resolve_in(doc, schema), stack);
        stack.pop();
        return converted;
    }
    let Some(object) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in object {
        if OPENAPI_ONLY.contains(&key.as_str()) || key.starts_with("x-") || key == "nullable" {
            continue;
        }
        let converted = match key.as_str() {
            "properties" | "patternProperties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, s)| (name.clone(), to_json_schema(doc, s, stack)))
                    .collect(),
            ),
            "items" | "additionalProperties" | "not" if value.is_object() => {
                to_json_schema(doc, value, stack)
            }
            "allOf" | "anyOf" | "oneOf" | "items" => Value::Array(
                value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| to_json_schema(doc, s, stack))
                    .collect(),
            ),
            "required" if value.as_array().is_some_and(Vec::is_empty) => continue,
            _ => value.clone(),
        };
        out.insert(key.clone(), converted);
    }
    if object.get("nullable") == Some(&Value::Bool(true)) {
        let composed = ["allOf", "anyOf", "oneOf"]
            .iter()
            .any(|k| out.contains_key(*k));
        match out.get("type").cloned() {
            Some(Value::String(kind)) if !composed => {
                out.insert("type".to_owned(), json!([kind, "null"]));
                if let Some(Value::Array(values)) = out.get_mut("enum")
                    && !values.contains(&Value::Null)
                {
                    values.push(Value::Null);
                }
            }
            _ => return json!({ "anyOf": [{ "type": "null" }, Value::Object(out)] }),
        }
    }
    Value::Object(out)
}
