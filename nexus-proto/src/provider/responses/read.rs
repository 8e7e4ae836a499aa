//! The narrow reading of Responses objects and output items: borrowed views
//! of the few fields the decoder uses, read in one pass with the acceptance
//! of a whole `serde_json::Value` (every other field is checked and skipped
//! with [`Skip`], never built; a repeated key keeps its last value, as a
//! `Value` map does; a field of an unexpected type reads as absent, as
//! `value.get(key).and_then(Value::as_str)` would). So a body read this way
//! decodes exactly as the whole value does, without building the response
//! (which echoes the request's instructions and tools) or its items.
//!
//! A reasoning item is the exception: it goes back verbatim, so it alone is
//! built as a `Value` (see [`read_items`]).

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{Ending, Item, WireUsage};
use crate::message::Usage;
use crate::provider::openai::TokenDetails;
use crate::provider::wire::{
    read_fields, scalars_are, skip_value, Array, Fields, LenientStr, Object, Skip, Strict, WireStr,
};

/// The fields of a response object the decoder reads.
#[derive(Default)]
pub(super) struct WireResponse<'a> {
    /// `None` when absent or null; `Some(Array(None))` when not an array.
    pub(super) output: Option<Array<Object<WireItem<'a>>>>,
    pub(super) status: LenientStr<'a>,
    incomplete_details: Object<Incomplete<'a>>,
    usage: Object<WireUsageFields>,
    pub(super) model: LenientStr<'a>,
}

impl<'de: 'a, 'a> Fields<'de> for WireResponse<'a> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "output" => self.output = map.next_value()?,
            "status" => self.status = map.next_value()?,
            "incomplete_details" => self.incomplete_details = map.next_value()?,
            "usage" => self.usage = map.next_value()?,
            "model" => self.model = map.next_value()?,
            _ => skip_value(map)?,
        }
        Ok(())
    }
}

impl WireResponse<'_> {
    /// Whether `status` is `failed`.
    pub(super) fn failed(&self) -> bool {
        self.status.0.as_deref() == Some("failed")
    }

    /// How the response ended (as [`Ending::read`] reads the whole value).
    pub(super) fn ending(&mut self) -> Ending {
        let owned = |s: &mut LenientStr<'_>| s.0.take().map(WireStr::into_owned);
        Ending {
            status: owned(&mut self.status),
            incomplete_reason: self.incomplete_details.0.as_mut().and_then(|d| owned(&mut d.reason)),
            usage: self.usage.0.take().and_then(WireUsageFields::into_wire).map(Usage::from),
            model: owned(&mut self.model).filter(|m| !m.is_empty()),
        }
    }
}

#[derive(Default)]
struct Incomplete<'a> {
    reason: LenientStr<'a>,
}

impl<'de: 'a, 'a> Fields<'de> for Incomplete<'a> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "reason" => self.reason = map.next_value()?,
            _ => skip_value(map)?,
        }
        Ok(())
    }
}

/// The fields of an output item the decoder reads, whatever its kind.
#[derive(Default)]
pub(crate) struct WireItem<'a> {
    kind: LenientStr<'a>,
    id: LenientStr<'a>,
    status: LenientStr<'a>,
    phase: LenientStr<'a>,
    call_id: LenientStr<'a>,
    name: LenientStr<'a>,
    arguments: Arguments<'a>,
    content: Array<Object<WirePart<'a>>>,
}

impl<'de: 'a, 'a> Fields<'de> for WireItem<'a> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "type" => self.kind = map.next_value()?,
            "id" => self.id = map.next_value()?,
            "status" => self.status = map.next_value()?,
            "phase" => self.phase = map.next_value()?,
            "call_id" => self.call_id = map.next_value()?,
            "name" => self.name = map.next_value()?,
            "arguments" => self.arguments = map.next_value()?,
            "content" => self.content = map.next_value()?,
            _ => skip_value(map)?,
        }
        Ok(())
    }
}

impl WireItem<'_> {
    /// Whether this item is kept verbatim (reasoning, compaction), so read as a value.
    pub(crate) fn is_kept_whole(&self) -> bool {
        matches!(self.kind.0.as_deref(), Some("reasoning" | "compaction"))
    }

    /// Whether this is a function call.
    pub(crate) fn is_call(&self) -> bool {
        self.kind.0.as_deref() == Some("function_call")
    }

    /// Its `call_id`, empty when that is not a string.
    pub(crate) fn call_id(&self) -> &str {
        self.call_id.0.as_deref().unwrap_or_default()
    }

    /// Its `name`, empty when that is not a string.
    pub(crate) fn name_or_empty(&self) -> &str {
        self.name.0.as_deref().unwrap_or_default()
    }

    /// Its `name`, when that is a non-empty string.
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.0.as_deref().filter(|n| !n.is_empty())
    }

    /// The item, as [`Item::read`] reads the same object; `None` for a
    /// reasoning or compaction item, which only the whole value gives.
    pub(crate) fn into_item(self) -> Option<Item> {
        let string = |s: LenientStr<'_>| s.0.map(|s| Value::String(s.into_owned()));
        let text = |s: LenientStr<'_>| s.0.map(WireStr::into_owned).unwrap_or_default();
        Some(match self.kind.0.as_deref().unwrap_or_default() {
            "reasoning" | "compaction" => return None,
            "message" => {
                let mut meta = Map::new();
                for (key, value) in [("id", self.id), ("status", self.status), ("phase", self.phase)] {
                    if let Some(v) = string(value) {
                        meta.insert(key.into(), v);
                    }
                }
                let mut parts = Vec::new();
                for part in self.content.0.into_iter().flatten().filter_map(|p| p.0) {
                    match part.kind.0.as_deref() {
                        Some("output_text") => {
                            let annotations = part.annotations.filter(|a| a.as_array().is_some_and(|a| !a.is_empty()));
                            parts.push((text(part.text), annotations, false));
                        }
                        Some("refusal") => parts.push((text(part.refusal), None, true)),
                        _ => {}
                    }
                }
                Item::Message { meta, parts }
            }
            "function_call" => {
                let mut meta = Map::new();
                for (key, value) in [("id", self.id), ("status", self.status)] {
                    if let Some(v) = string(value) {
                        meta.insert(key.into(), v);
                    }
                }
                let arguments = match self.arguments {
                    Arguments::Text(s) => s.into_owned(),
                    Arguments::Object(v) => v.to_string(),
                    Arguments::None => String::new(),
                };
                Item::Call { call_id: text(self.call_id), name: text(self.name), arguments, meta }
            }
            _ => Item::Other,
        })
    }
}

/// A part of a message's `content` (`output_text` or `refusal`; others are
/// read and dropped).
#[derive(Default)]
struct WirePart<'a> {
    kind: LenientStr<'a>,
    text: LenientStr<'a>,
    refusal: LenientStr<'a>,
    annotations: Option<Value>,
}

impl<'de: 'a, 'a> Fields<'de> for WirePart<'a> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "type" => self.kind = map.next_value()?,
            "text" => self.text = map.next_value()?,
            "refusal" => self.refusal = map.next_value()?,
            "annotations" => self.annotations = map.next_value()?,
            _ => skip_value(map)?,
        }
        Ok(())
    }
}

/// A call's `arguments`: a string's contents, or (some compatible servers)
/// an object, whose JSON text they become; anything else is none.
#[derive(Default)]
enum Arguments<'a> {
    #[default]
    None,
    Text(WireStr<'a>),
    Object(Value),
}

impl<'de: 'a, 'a> Deserialize<'de> for Arguments<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Arguments<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            scalars_are!(@not_str Arguments::None);

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Arguments::Text(WireStr(v.into())))
            }

            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Arguments::Text(WireStr(v.to_owned().into())))
            }

            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Arguments::Text(WireStr(v.into())))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Skip.visit_seq(seq).map(|_| Arguments::None)
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Value::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Arguments::Object)
            }
        }
        d.deserialize_any(V)
    }
}

/// `usage`, read as [`WireUsage`] reads it from a value: a field of the wrong
/// type makes the whole usage unreadable (none), as the error there does.
#[derive(Default)]
struct WireUsageFields {
    input_tokens: Count,
    output_tokens: Count,
    total_tokens: Count,
    input_tokens_details: Details,
    output_tokens_details: Details,
}

impl<'de> Fields<'de> for WireUsageFields {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "input_tokens" => self.input_tokens = map.next_value()?,
            "output_tokens" => self.output_tokens = map.next_value()?,
            "total_tokens" => self.total_tokens = map.next_value()?,
            "input_tokens_details" => self.input_tokens_details = map.next_value()?,
            "output_tokens_details" => self.output_tokens_details = map.next_value()?,
            _ => skip_value(map)?,
        }
        Ok(())
    }
}

impl WireUsageFields {
    fn into_wire(self) -> Option<WireUsage> {
        Some(WireUsage {
            input_tokens: self.input_tokens.ok()?,
            output_tokens: self.output_tokens.ok()?,
            total_tokens: self.total_tokens.ok()?,
            input_tokens_details: self.input_tokens_details.ok()?,
            output_tokens_details: self.output_tokens_details.ok()?,
        })
    }
}

/// An `Option<u64>` field as it reads from a value: null is none, a
/// non-negative integer a count, anything else a type error.
#[derive(Default)]
enum Count {
    #[default]
    Null,
    Some(u64),
    Invalid,
}

impl Count {
    fn ok(self) -> Option<Option<u64>> {
        match self {
            Count::Null => Some(None),
            Count::Some(n) => Some(Some(n)),
            Count::Invalid => None,
        }
    }

    /// The count as `Value::as_u64` reads it: anything else is none.
    fn lenient(self) -> Option<u64> {
        match self {
            Count::Some(n) => Some(n),
            Count::Null | Count::Invalid => None,
        }
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_bool<E>(self, _: bool) -> Result<Count, E> {
                Ok(Count::Invalid)
            }

            fn visit_i64<E>(self, v: i64) -> Result<Count, E> {
                Ok(u64::try_from(v).map_or(Count::Invalid, Count::Some))
            }

            fn visit_u64<E>(self, v: u64) -> Result<Count, E> {
                Ok(Count::Some(v))
            }

            fn visit_f64<E>(self, _: f64) -> Result<Count, E> {
                Ok(Count::Invalid)
            }

            fn visit_str<E>(self, _: &str) -> Result<Count, E> {
                Ok(Count::Invalid)
            }

            fn visit_unit<E>(self) -> Result<Count, E> {
                Ok(Count::Null)
            }

            fn visit_none<E>(self) -> Result<Count, E> {
                Ok(Count::Null)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Count, A::Error> {
                Skip.visit_seq(seq).map(|_| Count::Invalid)
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Count, A::Error> {
                Skip.visit_map(map).map(|_| Count::Invalid)
            }
        }
        d.deserialize_any(V)
    }
}

/// An `Option<TokenDetails>` field as it reads from a value: null is none,
/// an object its two lenient counts, an array of at most two values those
/// counts by position (serde reads a struct from an array so), anything
/// else a type error.
#[derive(Default)]
enum Details {
    #[default]
    Null,
    Some(TokenDetails),
    Invalid,
}

impl Details {
    fn ok(self) -> Option<Option<TokenDetails>> {
        match self {
            Details::Null => Some(None),
            Details::Some(d) => Some(Some(d)),
            Details::Invalid => None,
        }
    }
}

impl<'de> Fields<'de> for TokenDetails {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "cached_tokens" => self.cached_tokens = map.next_value::<Count>()?.lenient(),
            "reasoning_tokens" => self.reasoning_tokens = map.next_value::<Count>()?.lenient(),
            _ => skip_value(map)?,
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Details {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Details;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            scalars_are!(Details::Invalid);

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Details, A::Error> {
                let mut counts = Vec::new();
                while let Some(count) = seq.next_element::<Count>()? {
                    counts.push(count.lenient());
                }
                Ok(match counts[..] {
                    [] => Details::Some(TokenDetails::default()),
                    [cached] => Details::Some(TokenDetails { cached_tokens: cached, reasoning_tokens: None }),
                    [cached, reasoning] => {
                        Details::Some(TokenDetails { cached_tokens: cached, reasoning_tokens: reasoning })
                    }
                    _ => Details::Invalid,
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Details, A::Error> {
                read_fields(map).map(Details::Some)
            }
        }
        // Null is none, as for an `Option`; the rest as the visitor says.
        struct Nullable;
        impl<'de> Visitor<'de> for Nullable {
            type Value = Details;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_unit<E>(self) -> Result<Details, E> {
                Ok(Details::Null)
            }

            fn visit_none<E>(self) -> Result<Details, E> {
                Ok(Details::Null)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Details, D::Error> {
                d.deserialize_any(V)
            }
        }
        d.deserialize_option(Nullable)
    }
}

/// Reads the items of an `output` read narrowly, in order: `None` for an
/// item that is not an object. A reasoning item is taken whole from
/// `value_of(index)` and read by [`Item::read`]; `None` when that gives
/// nothing.
pub(super) fn read_items(
    wire: Vec<Object<WireItem<'_>>>,
    mut value_of: impl FnMut(usize) -> Option<Value>,
) -> Option<Vec<Option<Item>>> {
    let mut items = Vec::with_capacity(wire.len());
    for (index, item) in wire.into_iter().enumerate() {
        items.push(match item.0 {
            None => None,
            Some(item) => match item.into_item() {
                Some(item) => Some(item),
                None => Some(Item::read(value_of(index)?).ok()?),
            },
        });
    }
    Some(items)
}

/// The `output` items of a whole response body as raw JSON (the last
/// `output` key, as a `Value` map keeps), for the reasoning items among them.
pub(super) fn raw_output(body: &[u8]) -> Option<Vec<&RawValue>> {
    #[derive(Default)]
    struct Output<'a>(Option<Vec<&'a RawValue>>);
    impl<'de> Fields<'de> for Output<'de> {
        fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
            match key {
                "output" => self.0 = map.next_value()?,
                // Already checked by the narrow reading: only skimmed here.
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(())
        }
    }
    serde_json::from_slice::<Strict<Output<'_>>>(body).ok()?.0 .0
}
