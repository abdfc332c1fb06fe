//! Unit tests of the elicitation adapter: forms read from the wire, answers parsed and sent.

use serde_json::json;

use super::*;

fn request(v: serde_json::Value) -> CreateElicitationRequest {
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_form_reads_as_fields_required_first_and_a_url_is_not_asked() {
    let ask = ask_of(&request(json!({
        "mode": "form", "sessionId": "s", "message": "Details?",
        "requestedSchema": { "type": "object", "required": ["tags"], "properties": {
            "ok": { "type": "boolean" },
            "ratio": { "type": "number", "title": "Ratio" },
            "tags": { "type": "array", "items": { "type": "string", "enum": ["a", "b"] } },
            "level": { "type": "string", "enum": ["low", "high"] },
        }},
    })))
    .unwrap();
    let names: Vec<&str> = ask.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["tags", "level", "ok", "ratio"]);
    assert_eq!(ask.fields[3].label, "Ratio");
    assert_eq!(ask.fields[2].kind.choices(), ["yes", "no"]);
    assert_eq!(ask.fields[1].kind.choices(), ["low", "high"]);
    let url = request(json!({
        "mode": "url", "sessionId": "s", "message": "Log in",
        "elicitationId": "e1", "url": "https://example.com/login",
    }));
    assert!(ask_of(&url).unwrap_err().contains("only form"));
}

#[test]
fn answers_parse_as_their_field_and_go_back_as_the_protocol_says() {
    let many = FieldKind::ManyOf(vec![
        ("a".into(), "Alpha".into()),
        ("b".into(), "Beta".into()),
    ]);
    assert_eq!(
        many.parse("alpha, Beta"),
        Ok(FieldValue::Many(vec!["a".into(), "b".into()]))
    );
    assert!(many.parse("Gamma").unwrap_err().contains("not one of"));
    assert_eq!(
        FieldKind::Boolean.parse(" Yes "),
        Ok(FieldValue::Boolean(true))
    );
    assert!(FieldKind::Boolean.parse("maybe").is_err());
    assert_eq!(FieldKind::Number.parse("2.5"), Ok(FieldValue::Number(2.5)));
    assert!(FieldKind::Number.parse("NaN").is_err());
    let sent = |a| serde_json::to_value(response_of(a)).unwrap();
    assert_eq!(
        sent(ElicitAnswer::Accept(vec![
            ("ok".into(), FieldValue::Boolean(false)),
            ("tags".into(), FieldValue::Many(vec!["a".into()])),
        ])),
        json!({ "action": "accept", "content": { "ok": false, "tags": ["a"] } })
    );
    assert_eq!(sent(ElicitAnswer::Decline), json!({ "action": "decline" }));
    assert_eq!(sent(ElicitAnswer::Cancel), json!({ "action": "cancel" }));
}

#[test]
fn an_answer_outside_the_schemas_bounds_is_named() {
    let ask = ask_of(&request(json!({
        "mode": "form", "sessionId": "s", "message": "Limits",
        "requestedSchema": { "type": "object", "properties": {
            "n": { "type": "integer", "minimum": 1, "maximum": 5 },
            "name": { "type": "string", "minLength": 3 },
            "tags": { "type": "array", "maxItems": 1, "items": { "type": "string", "enum": ["a", "b"] } },
        }},
    })))
    .unwrap();
    let field = |name: &str| ask.fields.iter().find(|f| f.name == name).unwrap();
    assert_eq!(field("n").parse("3"), Ok(FieldValue::Integer(3)));
    assert_eq!(field("n").parse("9"), Err("it is over 5".into()));
    assert_eq!(
        field("name").parse("ab"),
        Err("its length is under 3".into())
    );
    assert_eq!(
        field("tags").parse("a, b"),
        Err("the number picked is over 1".into())
    );
}
