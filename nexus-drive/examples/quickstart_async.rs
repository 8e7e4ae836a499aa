//! The async quickstart: the same two tools as `quickstart`, on smol.
//!
//! ```text
//! cargo run -p nexus-drive --example quickstart_async                      # offline, scripted model
//! OPENAI_API_KEY=sk-… cargo run -p nexus-drive --example quickstart_async  # the real API
//! ```
//!
//! An [`AsyncTool`] returns a future; the calls of one model turn are polled
//! concurrently on the task that drives the run. The two tools here both
//! wait 500 ms, and the example prints whether the turn's tools took
//! about 500 ms together (concurrent), not 1 s.

mod support;

use std::time::{Duration, Instant};

use nexus_drive::asynchronous::AsyncClient;
use nexus_drive::{AsyncTool, DriveError, ToolContext, ToolError, ToolOutcome};
use nexus_tests::fake::{ExpectFinal, Script, Turn};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// How long each tool pretends to wait on a remote service.
const LATENCY: Duration = Duration::from_millis(500);

#[derive(Debug, Deserialize)]
struct WeatherArgs {
    city: String,
}

#[derive(Debug, Serialize)]
struct Weather {
    city: String,
    celsius: i32,
    sky: &'static str,
}

struct GetWeather;

impl AsyncTool for GetWeather {
    const NAME: &'static str = "get_weather";
    type Args = WeatherArgs;
    type Output = Weather;

    fn description(&self) -> String {
        "The current weather in a city.".into()
    }

    fn input_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        }))
    }

    async fn call(&self, args: WeatherArgs, _ctx: ToolContext) -> Result<ToolOutcome<Weather>, ToolError> {
        smol::Timer::after(LATENCY).await;
        let (celsius, sky) = match args.city.as_str() {
            "Paris" => (18, "sunny"),
            "London" => (14, "cloudy"),
            _ => return Err(ToolError::msg(format!("no weather station in {}", args.city))),
        };
        println!("  [tool] get_weather({}) -> {celsius}°C, {sky}", args.city);
        Ok(ToolOutcome::Done(Weather { city: args.city, celsius, sky }))
    }
}

#[derive(Debug, Deserialize)]
struct AddArgs {
    a: i64,
    b: i64,
}

struct Add;

impl AsyncTool for Add {
    const NAME: &'static str = "add";
    type Args = AddArgs;
    type Output = i64;

    fn description(&self) -> String {
        "Adds two integers.".into()
    }

    fn input_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        }))
    }

    async fn call(&self, args: AddArgs, _ctx: ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
        smol::Timer::after(LATENCY).await;
        let sum = args.a.checked_add(args.b).ok_or_else(|| ToolError::msg("the sum overflows"))?;
        println!("  [tool] add({}, {}) -> {sum}", args.a, args.b);
        Ok(sum.into())
    }
}

/// The scripted model (offline): both tools in one turn, then the answer.
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
        .async_tool(GetWeather)
        .async_tool(Add)
        .build()?;
    let client = AsyncClient::new(config);

    smol::block_on(async {
        let started = Instant::now();
        let result = client.run("What's the weather in Paris, and what is 2 + 2?").await?;
        let elapsed = started.elapsed();

        for call in &result.tool_calls {
            let mark = if call.is_error { "error" } else { "ok" };
            println!("call {} {} -> {mark}: {}", call.name, call.input, call.output);
        }
        // Offline the model answers at once, so the run's time is the tools'
        // time: one LATENCY when they ran concurrently, two when they did not.
        if provider.is_offline() {
            let concurrent = elapsed < LATENCY * 2;
            println!("tools ran concurrently: {concurrent}");
        }
        println!("status: {:?}, turns: {}, tokens: {}", result.status, result.turns, result.usage.total_tokens);
        println!("answer: {}", result.text);
        Ok(())
    })
}
