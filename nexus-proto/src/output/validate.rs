//! Validation of the final value against the spec's schema, with the
//! `jsonschema` crate (feature `json-schema`). Without the feature a run
//! asking for typed output is refused when it is made, so no value ever
//! comes back unchecked.

use serde_json::Value;

/// A compiled output schema (a clone shares the compiled form).
#[derive(Debug, Clone)]
pub struct SchemaCheck {
    #[cfg(feature = "json-schema")]
    validator: jsonschema::Validator,
}

/// At most this many errors go back to the model (and into the error).
const MAX_ERRORS: usize = 8;

impl SchemaCheck {
    /// Compiles `schema` (draft 2020-12 unless its `$schema` says otherwise;
    /// only references inside the schema resolve: nothing is fetched).
    pub fn compile(schema: &Value) -> Result<SchemaCheck, String> {
        #[cfg(feature = "json-schema")]
        {
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft202012)
                .build(schema)
                .map(|validator| SchemaCheck { validator })
                .map_err(|e| format!("invalid output schema: {e}"))
        }
        #[cfg(not(feature = "json-schema"))]
        {
            let _ = schema;
            Err("typed output needs nexus-proto's `json-schema` feature (the validator)".into())
        }
    }

    /// The validation errors of `value`, each as `at <JSON pointer>: <what>`
    /// (empty when it is valid).
    pub fn errors(&self, value: &Value) -> Vec<String> {
        #[cfg(feature = "json-schema")]
        {
            self.validator
                .iter_errors(value)
                .take(MAX_ERRORS)
                .map(|e| {
                    let at = e.instance_path().to_string();
                    format!("at {}: {e}", if at.is_empty() { "/" } else { at.as_str() })
                })
                .collect()
        }
        #[cfg(not(feature = "json-schema"))]
        {
            let _ = (value, MAX_ERRORS);
            vec!["no validator".into()]
        }
    }
}
