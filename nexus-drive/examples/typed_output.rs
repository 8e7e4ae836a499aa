//! Typed final output: the run ends in a value that validates against a
//! JSON Schema, whatever the provider.
//!
//! ```text
//! cargo run -p nexus-drive --example typed_output                      # offline, scripted model
//! OPENAI_API_KEY=sk-… cargo run -p nexus-drive --example typed_output  # the real API
//! cargo run -p nexus-drive --example typed_output --features schemars  # the schema derived from the type
//! ```
//!
//! The machine picks how each upstream is asked for the value (the
//! provider's own schema field, an output tool, or the schema in the
//! prompt), records the choice in the run, validates the answer locally and
//! gives the model its validation errors to try again. Here the scripted
//! model first answers with a reading that breaks the schema, then fixes it.

mod support;

use nexus_drive::blocking::Client;
use nexus_drive::output::decide;
use nexus_drive::{DriveError, OutputSpec, Strategy, Tool, ToolContext, ToolError, ToolOutcome};
use nexus_tests::fake::{Script, Turn};
use serde::Deserialize;
use serde_json::Value;

/// What the run must end in.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
struct Forecast {
    /// The city.
    city: String,
    /// Degrees Celsius.
    celsius: f64,
    /// What to wear, if anything.
    advice: Option<String>,
}

#[cfg(feature = "schemars")]
fn forecast_schema() -> Value {
    nexus_drive::tool::schema_for::<Forecast>()
}

#[cfg(not(feature = "schemars"))]
fn forecast_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city."},
            "celsius": {"type": "number", "description": "Degrees Celsius."},
            "advice": {"type": ["string", "null"], "description": "What to wear, if anything."}
        },
        "required": ["city", "celsius"]
    })
}

#[derive(Debug, Deserialize)]
struct WeatherArgs {
    city: String,
}

struct GetWeather;

impl Tool for GetWeather {
    const NAME: &'static str = "get_weather";
    type Args = WeatherArgs;
    type Output = String;

    fn description(&self) -> String {
        "The current weather in a city.".into()
    }

    fn input_schema(&self) -> Option<Value> {
        Some(serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}))
    }

    fn call(&self, args: WeatherArgs, _ctx: &ToolContext) -> Result<ToolOutcome<String>, ToolError> {
        println!("  [tool] get_weather({})", args.city);
        Ok(ToolOutcome::Done(format!("{}: 18.5 °C, light rain", args.city)))
    }
}

/// The scripted model's part: look the weather up, answer with a reading
/// that is not a number, then with a valid value. How it answers depends on
/// the strategy the machine picks for this upstream.
fn script(strategy: Strategy) -> Script {
    let answer = |json: &str| match strategy {
        Strategy::Tool => Turn::default().call("final_result", json),
        Strategy::Prompted => Turn::text(format!("```json\n{json}\n```")),
        Strategy::Native => Turn::text(json),
    };
    Script::new(vec![
        Turn::default().call("get_weather", r#"{"city": "Paris"}"#),
        answer(r#"{"city": "Paris", "celsius": "mild"}"#),
        answer(r#"{"city": "Paris", "celsius": 18.5, "advice": "an umbrella"}"#),
    ])
}

fn main() -> Result<(), DriveError> {
    let spec = OutputSpec::new(forecast_schema());
    // The same pure function the machine calls; offline it picks the script.
    let style = std::env::var("NEXUS_STYLE").ok().and_then(|s| nexus_drive::Style::parse(&s));
    let (strategy, why) = decide(&spec, style.unwrap_or(nexus_drive::Style::OpenAi), support::SCRIPTED_MODEL);
    println!("strategy for this upstream: {} ({why})", strategy.name());
    let provider = support::Provider::pick(script(strategy));

    let config = provider.builder().tool(GetWeather).output(spec).build()?;
    let result = Client::new(config).run("What's the weather in Paris? Advise me.")?;

    for record in &result.output_strategies {
        println!(
            "upstream {} used {} from turn {} ({})",
            record.upstream,
            record.strategy.name(),
            record.turn,
            record.reason
        );
    }
    println!("turns: {} (one of them the retry after the invalid answer)", result.turns);
    println!("output: {}", serde_json::to_string_pretty(&result.output).unwrap_or_default());
    let forecast: Forecast = result
        .output_as()
        .ok_or_else(|| DriveError::Config("the run ended without output".into()))?
        .map_err(|e| DriveError::Config(e.to_string()))?;
    let advice = forecast.advice.as_deref().unwrap_or("nothing");
    println!("typed: {} at {} °C: take {advice}", forecast.city, forecast.celsius);
    Ok(())
}
