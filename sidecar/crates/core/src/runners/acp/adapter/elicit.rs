//! ACP elicitation (`elicitation/create`, form mode): an agent asks its user for input. The
//! crate's form schema becomes our [`ElicitAsk`] (its fields one by one, each a kind Troupe can
//! ask a person about), and our [`ElicitAnswer`] becomes the crate's response.

use std::collections::BTreeMap;

use agent_client_protocol::v1::schema::{
    CreateElicitationRequest, CreateElicitationResponse, ElicitationAcceptAction,
    ElicitationAction, ElicitationContentValue, ElicitationMode, ElicitationPropertySchema,
    MultiSelectItems,
};

/// The agent asks the person for a form's values.
#[derive(Debug, Clone, PartialEq)]
pub struct ElicitAsk {
    pub message: String,
    /// Its fields, required ones first, each group in key order.
    pub fields: Vec<ElicitField>,
}

/// One value the form asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct ElicitField {
    /// The property's key in the answer.
    pub name: String,
    /// Its title (else its key) and description, as a person reads them.
    pub label: String,
    pub description: Option<String>,
    pub kind: FieldKind,
    pub required: bool,
    /// What the schema bounds: a number's value, a text's length, a pick's count.
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// What kind of value a field takes.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    Text,
    Number,
    Integer,
    Boolean,
    /// One of these (value, title).
    OneOf(Vec<(String, String)>),
    /// Any of these (value, title), named separated by commas.
    ManyOf(Vec<(String, String)>),
}

/// A field's value.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Text(String),
    Number(f64),
    Integer(i64),
    Boolean(bool),
    Many(Vec<String>),
}

/// The person's answer to the whole form.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitAnswer {
    Accept(Vec<(String, FieldValue)>),
    Decline,
    Cancel,
}

impl ElicitField {
    /// How a person's answer reads as this field's value, within its bounds, or what is wrong.
    pub fn parse(&self, answer: &str) -> Result<FieldValue, String> {
        let value = self.kind.parse(answer)?;
        let (measure, what) = match &value {
            FieldValue::Number(n) => (*n, "it"),
            FieldValue::Integer(i) => (*i as f64, "it"),
            FieldValue::Text(t) if self.kind == FieldKind::Text => {
                (t.chars().count() as f64, "its length")
            }
            FieldValue::Many(m) => (m.len() as f64, "the number picked"),
            _ => return Ok(value),
        };
        if let Some(min) = self.min.filter(|m| measure < *m) {
            return Err(format!("{what} is under {min}"));
        }
        if let Some(max) = self.max.filter(|m| measure > *m) {
            return Err(format!("{what} is over {max}"));
        }
        Ok(value)
    }
}

impl FieldKind {
    /// The choices a person picks from (empty: free text).
    pub fn choices(&self) -> Vec<String> {
        match self {
            FieldKind::Boolean => vec!["yes".into(), "no".into()],
            FieldKind::OneOf(options) => options.iter().map(|(_, t)| t.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// How a person's answer reads as this kind of value, or what is wrong with it.
    pub fn parse(&self, answer: &str) -> Result<FieldValue, String> {
        let answer = answer.trim();
        let find = |options: &[(String, String)], name: &str| {
            options
                .iter()
                .find(|(v, t)| t.eq_ignore_ascii_case(name) || v.eq_ignore_ascii_case(name))
                .map(|(v, _)| v.clone())
        };
        match self {
            FieldKind::Text => Ok(FieldValue::Text(answer.to_string())),
            FieldKind::Number => answer
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .map(FieldValue::Number)
                .ok_or_else(|| format!("{answer:?} is not a number")),
            FieldKind::Integer => answer
                .parse::<i64>()
                .map(FieldValue::Integer)
                .map_err(|_| format!("{answer:?} is not a whole number")),
            FieldKind::Boolean => match answer.to_ascii_lowercase().as_str() {
                "yes" | "true" | "y" => Ok(FieldValue::Boolean(true)),
                "no" | "false" | "n" => Ok(FieldValue::Boolean(false)),
                _ => Err(format!("{answer:?} is neither yes nor no")),
            },
            FieldKind::OneOf(options) => find(options, answer)
                .map(FieldValue::Text)
                .ok_or_else(|| format!("{answer:?} is not one of the choices")),
            FieldKind::ManyOf(options) => answer
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| find(options, n).ok_or_else(|| format!("{n:?} is not one of the options")))
                .collect::<Result<Vec<_>, _>>()
                .map(FieldValue::Many),
        }
    }
}

/// The form an `elicitation/create` asks for; why not, for one Troupe cannot ask (URL mode, a
/// property of a kind it does not know).
pub(super) fn ask_of(req: &CreateElicitationRequest) -> Result<ElicitAsk, String> {
    let ElicitationMode::Form(form) = &req.mode else {
        return Err("only form elicitations are supported".into());
    };
    let schema = &form.requested_schema;
    let required = schema.required.clone().unwrap_or_default();
    let mut fields = Vec::new();
    for (name, property) in &schema.properties {
        let ((title, description, kind), (min, max)) = match property {
            ElicitationPropertySchema::String(s) => {
                let kind = match (&s.one_of, &s.enum_values) {
                    (Some(options), _) => FieldKind::OneOf(
                        options
                            .iter()
                            .map(|o| (o.value.clone(), o.title.clone()))
                            .collect(),
                    ),
                    (None, Some(values)) => {
                        FieldKind::OneOf(values.iter().map(|v| (v.clone(), v.clone())).collect())
                    }
                    (None, None) => FieldKind::Text,
                };
                let length = (s.min_length.map(f64::from), s.max_length.map(f64::from));
                ((s.title.clone(), s.description.clone(), kind), length)
            }
            ElicitationPropertySchema::Number(n) => (
                (n.title.clone(), n.description.clone(), FieldKind::Number),
                (n.minimum, n.maximum),
            ),
            ElicitationPropertySchema::Integer(n) => (
                (n.title.clone(), n.description.clone(), FieldKind::Integer),
                (n.minimum.map(|m| m as f64), n.maximum.map(|m| m as f64)),
            ),
            ElicitationPropertySchema::Boolean(b) => (
                (b.title.clone(), b.description.clone(), FieldKind::Boolean),
                (None, None),
            ),
            ElicitationPropertySchema::Array(a) => {
                let options = match &a.items {
                    MultiSelectItems::String(s) => {
                        s.values.iter().map(|v| (v.clone(), v.clone())).collect()
                    }
                    MultiSelectItems::Titled(t) => t
                        .options
                        .iter()
                        .map(|o| (o.value.clone(), o.title.clone()))
                        .collect(),
                    _ => return Err(format!("field {name:?} has items of an unknown kind")),
                };
                (
                    (
                        a.title.clone(),
                        a.description.clone(),
                        FieldKind::ManyOf(options),
                    ),
                    (a.min_items.map(|m| m as f64), a.max_items.map(|m| m as f64)),
                )
            }
            _ => return Err(format!("field {name:?} is of an unknown kind")),
        };
        fields.push(ElicitField {
            name: name.clone(),
            label: title.unwrap_or_else(|| name.clone()),
            description,
            kind,
            required: required.contains(name),
            min,
            max,
        });
    }
    // Required fields first, each group in key order (the schema keeps its properties sorted).
    fields.sort_by_key(|f| !f.required);
    Ok(ElicitAsk {
        message: req.message.clone(),
        fields,
    })
}

pub(super) fn response_of(answer: ElicitAnswer) -> CreateElicitationResponse {
    let action = match answer {
        ElicitAnswer::Accept(values) => {
            let content: BTreeMap<String, ElicitationContentValue> = values
                .into_iter()
                .map(|(name, v)| {
                    let v = match v {
                        FieldValue::Text(s) => ElicitationContentValue::String(s),
                        FieldValue::Number(n) => ElicitationContentValue::Number(n),
                        FieldValue::Integer(i) => ElicitationContentValue::Integer(i),
                        FieldValue::Boolean(b) => ElicitationContentValue::Boolean(b),
                        FieldValue::Many(m) => ElicitationContentValue::StringArray(m),
                    };
                    (name, v)
                })
                .collect();
            ElicitationAction::Accept(ElicitationAcceptAction::new().content(content))
        }
        ElicitAnswer::Decline => ElicitationAction::Decline,
        ElicitAnswer::Cancel => ElicitationAction::Cancel,
    };
    CreateElicitationResponse::new(action)
}

#[cfg(test)]
mod tests;
