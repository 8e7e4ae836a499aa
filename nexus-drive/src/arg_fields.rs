//! The field names of a typed tool's argument type, read from its
//! `Deserialize` impl without a value: a struct (derived or by hand) names
//! its fields when it asks for a struct. A tool that declares no schema for
//! arguments that have fields would be offered to the model as taking none,
//! so registration refuses it (see [`Toolbox::add`](crate::Toolbox::add)).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// The fields `T` asks for when deserialized as a struct; `None` when it
/// asks for anything else (a map, a `Value`, a unit): its shape is open.
pub(crate) fn struct_fields<'de, T: Deserialize<'de>>() -> Option<&'static [&'static str]> {
    match T::deserialize(Probe) {
        Err(Found(fields)) => fields,
        Ok(_) => None,
    }
}

/// The deserializer that only records what it was asked for.
struct Probe;

/// Not a failure: how the probe stops, carrying what it found.
#[derive(Debug)]
struct Found(Option<&'static [&'static str]>);

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("probed")
    }
}

impl std::error::Error for Found {}

impl de::Error for Found {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Found(None)
    }
}

impl<'de> Deserializer<'de> for Probe {
    type Error = Found;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
        Err(Found(None))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Found> {
        Err(Found(Some(fields)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::HashMap;

    #[test]
    fn structs_name_their_fields_and_open_shapes_name_none() {
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Refund {
            order_id: String,
            #[serde(rename = "amountCents")]
            amount_cents: u64,
        }
        #[derive(Deserialize)]
        struct Nothing {}
        assert_eq!(struct_fields::<Refund>(), Some(&["order_id", "amountCents"][..]));
        assert_eq!(struct_fields::<Nothing>(), Some(&[][..]));
        assert_eq!(struct_fields::<serde_json::Value>(), None);
        assert_eq!(struct_fields::<HashMap<String, String>>(), None);
        assert_eq!(struct_fields::<()>(), None);
    }
}
