//! The output schema's lowering, over random schemas (objects with required
//! and optional properties, arrays, string enums, `$defs`/`$ref`, `anyOf`)
//! and random values valid against them:
//!
//! - each provider's wire schema keeps to that provider's subset (OpenAI
//!   strict: every object closed with every property required; Anthropic:
//!   every object closed, no numeric or length constraint; Gemini: only the
//!   keywords `responseJsonSchema` documents);
//! - a valid value, written the way strict mode asks (every optional
//!   property present, `null` when absent), validates against the strict
//!   schema, and undoing the rewrite gives back the value, valid against
//!   the original; the same value validates against the Anthropic and
//!   Gemini schemas.
#![cfg(feature = "json-schema")]

use nexus_proto::output::lower::{for_style, undo_nullable};
use nexus_proto::output::SchemaCheck;
use nexus_proto::Style;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union};
use serde_json::{json, Map, Value};

/// A schema, as the generator builds it.
#[derive(Debug, Clone)]
enum Shape {
    Str,
    Int {
        min: Option<i64>,
    },
    Bool,
    Enum(Vec<String>),
    Array(Box<Shape>),
    Object(Vec<(String, Shape, bool)>),
    AnyOf(Vec<Shape>),
    /// `#/$defs/<name>`; the definitions hold no references.
    Ref(usize),
}

const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

fn leaf() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Str),
        proptest::option::of(-5i64..5).prop_map(|min| Shape::Int { min }),
        Just(Shape::Bool),
        vec("[a-z]{1,4}", 1..4).prop_map(|mut v| {
            v.sort();
            v.dedup();
            Shape::Enum(v)
        }),
    ]
}

fn object_of(inner: impl Strategy<Value = Shape> + Clone) -> impl Strategy<Value = Shape> {
    vec((inner, any::<bool>()), 1..4).prop_map(|props| {
        Shape::Object(props.into_iter().enumerate().map(|(i, (s, req))| (NAMES[i].to_string(), s, req)).collect())
    })
}

/// Shapes without references (the definitions).
fn plain() -> impl Strategy<Value = Shape> + Clone {
    leaf().prop_recursive(2, 12, 3, |inner| {
        prop_oneof![inner.clone().prop_map(|s| Shape::Array(Box::new(s))), object_of(inner)]
    })
}

/// Shapes that may refer to one of `defs` definitions.
fn shape(defs: usize) -> impl Strategy<Value = Shape> + Clone {
    let base = if defs == 0 { leaf().boxed() } else { prop_oneof![leaf(), (0..defs).prop_map(Shape::Ref)].boxed() };
    base.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|s| Shape::Array(Box::new(s))),
            object_of(inner.clone()),
            // Branches of different kinds, so a value fits one branch.
            (object_of(inner), prop_oneof![Just(Shape::Str), Just(Shape::Bool)])
                .prop_map(|(o, l)| Shape::AnyOf(vec![o, l])),
        ]
    })
}

fn to_schema(s: &Shape) -> Value {
    match s {
        Shape::Str => json!({"type": "string", "maxLength": 8}),
        Shape::Int { min: Some(m) } => json!({"type": "integer", "minimum": m}),
        Shape::Int { min: None } => json!({"type": "integer"}),
        Shape::Bool => json!({"type": "boolean"}),
        Shape::Enum(v) => json!({"type": "string", "enum": v}),
        Shape::Array(inner) => json!({"type": "array", "items": to_schema(inner)}),
        Shape::Object(props) => {
            let properties: Map<String, Value> = props.iter().map(|(n, s, _)| (n.clone(), to_schema(s))).collect();
            let required: Vec<&str> = props.iter().filter(|p| p.2).map(|p| p.0.as_str()).collect();
            json!({"type": "object", "properties": properties, "required": required})
        }
        Shape::AnyOf(branches) => json!({"anyOf": branches.iter().map(to_schema).collect::<Vec<_>>()}),
        Shape::Ref(i) => json!({"$ref": format!("#/$defs/d{i}")}),
    }
}

/// A property's name and its value pair, absent when optional and left out.
type Field = (String, Option<(Value, Value)>);

/// Values valid against `s`: `(as written, as strict mode writes it)`.
fn values(s: &Shape, defs: &[Shape]) -> BoxedStrategy<(Value, Value)> {
    let same = |v: Value| (v.clone(), v);
    match s {
        Shape::Str => "[a-z]{0,8}".prop_map(move |t| same(Value::from(t))).boxed(),
        Shape::Int { min } => {
            let lo = min.unwrap_or(-100);
            (lo..lo + 100).prop_map(move |n| same(Value::from(n))).boxed()
        }
        Shape::Bool => any::<bool>().prop_map(move |b| same(Value::from(b))).boxed(),
        Shape::Enum(v) => proptest::sample::select(v.clone()).prop_map(move |t| same(Value::from(t))).boxed(),
        Shape::Array(inner) => vec(values(inner, defs), 0..3)
            .prop_map(|items| {
                let (a, b): (Vec<Value>, Vec<Value>) = items.into_iter().unzip();
                (Value::Array(a), Value::Array(b))
            })
            .boxed(),
        Shape::Object(props) => {
            let fields: Vec<BoxedStrategy<Field>> = props
                .iter()
                .map(|(name, sub, required)| {
                    let name = name.clone();
                    let v = values(sub, defs);
                    if *required {
                        v.prop_map(move |v| (name.clone(), Some(v))).boxed()
                    } else {
                        proptest::option::of(v).prop_map(move |v| (name.clone(), v)).boxed()
                    }
                })
                .collect();
            fields
                .prop_map(|fields| {
                    let (mut written, mut strict) = (Map::new(), Map::new());
                    for (name, v) in fields {
                        match v {
                            Some((w, s)) => {
                                written.insert(name.clone(), w);
                                strict.insert(name, s);
                            }
                            None => {
                                strict.insert(name, Value::Null);
                            }
                        }
                    }
                    (Value::Object(written), Value::Object(strict))
                })
                .boxed()
        }
        Shape::AnyOf(branches) => Union::new(branches.iter().map(|b| values(b, defs))).boxed(),
        Shape::Ref(i) => values(&defs[*i], defs),
    }
}

fn case() -> impl Strategy<Value = (Value, Value, Value)> {
    vec(plain(), 0..3)
        .prop_flat_map(|defs| {
            let root = object_of(shape(defs.len()));
            (Just(defs), root)
        })
        .prop_flat_map(|(defs, root)| {
            let mut schema = to_schema(&root);
            if !defs.is_empty() {
                let d: Map<String, Value> =
                    defs.iter().enumerate().map(|(i, s)| (format!("d{i}"), to_schema(s))).collect();
                schema["$defs"] = Value::Object(d);
            }
            values(&root, &defs).prop_map(move |(w, s)| (schema.clone(), w, s))
        })
}

/// OpenAI strict mode's rules, on the wire schema.
fn strict_ok(s: &Value) -> Result<(), String> {
    let Some(o) = s.as_object() else { return Ok(()) };
    if o.get("type") == Some(&json!("object")) || o.contains_key("properties") {
        if o.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(format!("an open object: {s}"));
        }
        let keys: Vec<&String> = o["properties"].as_object().map(|p| p.keys().collect()).unwrap_or_default();
        let required: Vec<&str> = o["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if keys.iter().any(|k| !required.contains(&k.as_str())) {
            return Err(format!("a property not required: {s}"));
        }
    }
    walk(o, strict_ok)
}

fn anthropic_ok(s: &Value) -> Result<(), String> {
    let Some(o) = s.as_object() else { return Ok(()) };
    for k in ["minimum", "maximum", "minLength", "maxLength", "maxItems", "multipleOf"] {
        if o.contains_key(k) {
            return Err(format!("{k} left in {s}"));
        }
    }
    if (o.get("type") == Some(&json!("object")) || o.contains_key("properties"))
        && o.get("additionalProperties") != Some(&Value::Bool(false))
    {
        return Err(format!("an open object: {s}"));
    }
    walk(o, anthropic_ok)
}

const GEMINI_KEYS: [&str; 21] = [
    "$id",
    "$defs",
    "$ref",
    "$anchor",
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "oneOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
];

fn gemini_ok(s: &Value) -> Result<(), String> {
    let Some(o) = s.as_object() else { return Ok(()) };
    if let Some(k) = o.keys().find(|k| !GEMINI_KEYS.contains(&k.as_str())) {
        return Err(format!("{k} is not a responseJsonSchema keyword"));
    }
    walk(o, gemini_ok)
}

/// Applies `check` to every subschema.
fn walk(o: &Map<String, Value>, check: fn(&Value) -> Result<(), String>) -> Result<(), String> {
    for (k, v) in o {
        match (k.as_str(), v) {
            ("properties" | "$defs", Value::Object(m)) => m.values().try_for_each(check)?,
            ("items", v) => check(v)?,
            ("anyOf", Value::Array(a)) => a.iter().try_for_each(check)?,
            _ => {}
        }
    }
    Ok(())
}

fn valid(schema: &Value, value: &Value) -> Result<(), String> {
    let errors = SchemaCheck::compile(schema)?.errors(value);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{errors:?}\nschema {schema}\nvalue {value}"))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn lowered_schemas_keep_to_each_subset_and_valid_values_survive((schema, written, as_strict) in case()) {
        valid(&schema, &written).map_err(TestCaseError::fail)?;

        let strict = for_style(Style::OpenAi, &schema).expect("closed objects lower to strict");
        strict_ok(&strict).map_err(TestCaseError::fail)?;
        valid(&strict, &as_strict).map_err(TestCaseError::fail)?;
        let mut undone = as_strict.clone();
        undo_nullable(&mut undone, &schema);
        prop_assert_eq!(&undone, &written);
        prop_assert_eq!(for_style(Style::OpenAiResponses, &schema), Some(strict));

        let anthropic = for_style(Style::Anthropic, &schema).expect("no open object, no recursion");
        anthropic_ok(&anthropic).map_err(TestCaseError::fail)?;
        valid(&anthropic, &written).map_err(TestCaseError::fail)?;

        let gemini = for_style(Style::Gemini, &schema).expect("Gemini takes every schema");
        gemini_ok(&gemini).map_err(TestCaseError::fail)?;
        valid(&gemini, &written).map_err(TestCaseError::fail)?;
    }
}
