//! The blocking quickstart: a model with two typed tools.
//!
//! ```text
//! cargo run -p nexus-drive --example quickstart                      # offline, scripted model
//! OPENAI_API_KEY=sk-… cargo run -p nexus-drive --example quickstart  # the real API
//! cargo run -p nexus-drive --example quickstart --features schemars  # schemas derived from the Args types
//! ```
//!
//! A tool is a type implementing [`Tool`]: its arguments are a serde struct
//! (a call whose arguments do not fit gets an error result naming the
//! problem, and the model can try again), its output anything `Serialize`.
//! The two calls of one model turn run concurrently, on threads.

mod support;

use nexus_drive::blocking::Client;
use nexus_drive::{DriveError, Tool, ToolContext, ToolError, ToolOutcome};
use nexus_tests::fake::{ExpectFinal, Script, Turn};
use serde::{Deserialize, Serialize};
use serde_json::Value;

// The arguments of `get_weather`. (A doc comment here would become the
// schema's description with the `schemars` feature.)
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
struct WeatherArgs {
    /// The city, e.g. "Paris".
    city: String,
}

/// What `get_weather` returns (given to the model as JSON text).
#[derive(Debug, Serialize)]
struct Weather {
    city: String,
    celsius: i32,
    sky: &'static str,
}

struct GetWeather;

impl Tool for GetWeather {
    const NAME: &'static str = "get_weather";
    type Args = WeatherArgs;
    type Output = Weather;

    fn description(&self) -> String {
        "The current weather in a city.".into()
    }

    fn input_schema(&self) -> Option<Value> {
        Some(weather_schema())
    }

    fn call(&self, args: WeatherArgs, _ctx: &ToolContext) -> Result<ToolOutcome<Weather>, ToolError> {
        // A canned table stands in for a weather service.
        let (celsius, sky) = match args.city.as_str() {
            "Paris" => (18, "sunny"),
            "London" => (14, "cloudy"),
            _ => return Err(ToolError::msg(format!("no weather station in {}", args.city))),
        };
        println!("  [tool] get_weather({}) -> {celsius}°C, {sky}", args.city);
        Ok(ToolOutcome::Done(Weather { city: args.city, celsius, sky }))
    }
}

// The arguments of `add`.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
struct AddArgs {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

struct Add;

impl Tool for Add {
    const NAME: &'static str = "add";
    type Args = AddArgs;
    type Output = i64;

    fn description(&self) -> String {
        "Adds two integers.".into()
    }

    fn input_schema(&self) -> Option<Value> {
        Some(add_schema())
    }

    fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
        let sum = args.a.checked_add(args.b).ok_or_else(|| ToolError::msg("the sum overflows"))?;
        println!("  [tool] add({}, {}) -> {sum}", args.a, args.b);
        Ok(sum.into())
    }
}

// With the `schemars` feature the schemas come from the Args types (doc
// comments become descriptions); without it they are written by hand.
#[cfg(feature = "schemars")]
fn weather_schema() -> Value {
    nexus_drive::tool::schema_for::<WeatherArgs>()
}

#[cfg(feature = "schemars")]
fn add_schema() -> Value {
    nexus_drive::tool::schema_for::<AddArgs>()
}

#[cfg(not(feature = "schemars"))]
fn weather_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city, e.g. \"Paris\"."}},
        "required": ["city"],
    })
}

#[cfg(not(feature = "schemars"))]
fn add_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first addend."},
            "b": {"type": "integer", "description": "The second addend."},
        },
        "required": ["a", "b"],
    })
}

/// What the scripted model does offline: call both tools in one turn, then
/// answer. The final request must carry both tool results, or the scripted
/// provider refuses it (so a run that lost a result fails loudly).
fn script() -> Script {
    Script::new(vec![
        Turn::text("Let me check.").call("get_weather", r#"{"city": "Paris"}"#).call("add", r#"{"a": 2, "b": 2}"#),
        Turn::text("It is 18°C and sunny in Paris, and 2 + 2 = 4."),
    ])
    .expect_final(ExpectFinal {
        tool_result_contains: vec!["sunny".into(), "4".into()],
        tool_results: Some(2),
        messages: None,
    })
}

fn main() -> Result<(), DriveError> {
    let provider = support::Provider::pick(script());

    let config = provider
        .builder()
        .system("You are concise. Use the tools for weather and arithmetic.")
        .tool(GetWeather)
        .tool(Add)
        .build()?;
    for decl in config.toolbox().decls() {
        println!("tool {}: {}", decl.name, decl.input_schema);
    }

    let client = Client::new(config);
    let result = client.run("What's the weather in Paris, and what is 2 + 2?")?;

    for call in &result.tool_calls {
        let mark = if call.is_error { "error" } else { "ok" };
        println!("call {} {} -> {mark}: {}", call.name, call.input, call.output);
    }
    println!("status: {:?}, turns: {}, tokens: {}", result.status, result.turns, result.usage.total_tokens);
    println!("answer: {}", result.text);
    Ok(())
}
