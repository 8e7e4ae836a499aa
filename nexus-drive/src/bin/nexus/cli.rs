//! The command line, on clap's derive API. Each command's flags are the
//! fields of its `…Args` struct, in the command's own module; a field's doc
//! comment is its help text, so a new flag is one documented field. clap
//! parses every accepted form (`--flag VALUE`, `--flag=VALUE`, repeatable
//! flags, `--switch[=VALUE]`, `--` to end flags, `-` as a positional),
//! checks value types, suggests a near flag for a mistyped one and renders
//! the help; the commands check what spans several flags.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use nexus_proto::Style;

use crate::{decode, demo, replay, run, serve, store, tools};

/// The exit codes, at the end of the help of the commands that run the loop.
pub const EXIT_CODES: &str = "\
exit codes: 0 done · 3 pending (state written) · 4 incomplete · 2 usage or config error
            1 runtime error · 5 stored run not claimable (another resume holds it,
            or it is no longer waiting)";

const TOP_AFTER_HELP: &str = "\
`nexus COMMAND --help` describes each command.

exit codes: 0 done · 3 pending (state written) · 4 incomplete · 2 usage or config error
            1 runtime error · 5 stored run not claimable (another resume holds it,
            or it is no longer waiting)";

/// nexus — the LLM tool-calling loop (Anthropic, OpenAI, Gemini) from a shell
#[derive(Parser)]
#[command(name = "nexus", version, arg_required_else_help = true, after_help = TOP_AFTER_HELP)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands, in the order the help lists them.
// Parsed once per process: boxing the big `run` arguments would save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    Demo(demo::DemoArgs),
    Run(run::RunArgs),
    Resume(run::ResumeArgs),
    Runs(store::RunsArgs),
    Replay(replay::ReplayArgs),
    Tools(tools::ToolsArgs),
    Decode(decode::DecodeArgs),
    Serve(serve::ServeArgs),
    Completions(CompletionsArgs),
    /// Print the version (as --version does).
    #[command(hide = true)]
    Version,
}

/// Print a shell completion script for nexus
///
/// Writes the script to standard output. For example, bash:
/// `nexus completions bash > ~/.local/share/bash-completion/completions/nexus`;
/// zsh: `nexus completions zsh > "${fpath[1]}/_nexus"`;
/// fish: `nexus completions fish > ~/.config/fish/completions/nexus.fish`.
#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The `--style` flags' values: the four wire formats, by their names.
#[derive(Clone)]
pub struct StyleParser;

const STYLES: [Style; 4] = [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses];

impl TypedValueParser for StyleParser {
    type Value = Style;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Style, clap::Error> {
        // The possible-values parser words the error (and suggests the near name).
        let name = PossibleValuesParser::new(STYLES.map(Style::name)).parse_ref(cmd, arg, value)?;
        Ok(STYLES.into_iter().find(|s| s.name() == name).unwrap_or(Style::OpenAi))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(STYLES.into_iter().map(|s| PossibleValue::new(s.name()))))
    }
}

/// `--mcp FILE` (repeatable), for the commands that start MCP servers.
#[derive(Args, Default)]
pub struct McpArgs {
    /// MCP servers whose tools the model may call, as {server}__{tool}
    /// (repeatable): {"mcpServers": {NAME: {"command", "args", "env",
    /// "cwd"} | {"type": "http", "url", "headers"}}}, with ${VAR} expanded
    /// from the environment; optional per server: "allow", "deny" (tool
    /// lists), "timeout" (ms per call), "protocol" (auto, legacy or modern).
    /// A server that fails to start is left out with a warning.
    #[arg(long = "mcp", value_name = "FILE")]
    pub files: Vec<String>,
}

/// `--skills DIR` (repeatable) and `--skills-budget BYTES`, for the commands
/// that build a skills catalog.
#[derive(Args, Default)]
pub struct SkillsArgs {
    /// A directory of Agent Skills (folders with a SKILL.md); repeat it for
    /// several (the first one given wins a name clash). Their names and
    /// descriptions go into the system prompt; the model loads one with the
    /// `skill` tool, and may then `read` its files (with --builtins including
    /// read). Broken skills are skipped with a warning.
    #[arg(long = "skills", value_name = "DIR")]
    pub dirs: Vec<String>,
    /// The most bytes of system prompt the skills catalog may take (default
    /// 16384); skills past it are listed by name only.
    #[arg(long = "skills-budget", value_name = "BYTES", requires = "dirs")]
    pub budget: Option<usize>,
}

/// Prints the completion script for `shell`.
pub fn completions(args: CompletionsArgs) -> i32 {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "nexus", &mut script);
    crate::out_inline(&String::from_utf8_lossy(&script));
    0
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("nexus").chain(args.iter().copied()))
    }

    #[test]
    fn the_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn forms() {
        let Ok(Cli { command: Command::Run(r) }) = parse(&[
            "run",
            "--style",
            "anthropic",
            "hello",
            "--json",
            "--builtins=read,grep",
            "--fallback",
            "a",
            "--fallback=b",
            "--max-turns=3",
            "--",
            "--not-a-flag",
        ]) else {
            panic!("run parses")
        };
        assert_eq!(r.style, Style::Anthropic);
        assert!(r.json);
        assert_eq!(r.builtins, Some(Some("read,grep".to_string())));
        assert_eq!(r.fallback, ["a", "b"]);
        assert_eq!(r.max_turns, Some(3));
        assert_eq!(r.prompt, ["hello", "--not-a-flag"]);
        // A bare switch takes no value: the next word stays a positional.
        let Ok(Cli { command: Command::Run(r) }) = parse(&["run", "--builtins", "-"]) else { panic!("run parses") };
        assert_eq!((r.builtins, r.prompt), (Some(None), vec!["-".to_string()]));
        let Ok(Cli { command: Command::Tools(t) }) = parse(&["tools", "--skills", "a", "--skills=b", "--mcp", "m"])
        else {
            panic!("tools parses")
        };
        assert_eq!((t.skills.dirs, t.mcp.files), (vec!["a".to_string(), "b".to_string()], vec!["m".to_string()]));
    }

    #[test]
    fn mistakes_are_usage_errors() {
        for bad in [
            &["run", "--nope", "hi"][..],
            &["run", "--style"],
            &["run", "--json=1", "hi"],
            &["run", "--json", "--json", "hi"],
            &["run", "--style", "openai", "--style", "gemini", "hi"],
            &["run", "--max-turns", "x", "hi"],
            &["run", "--max-turns", "0", "hi"],
            &["run", "--style", "cobol", "hi"],
            &["launch"],
        ] {
            let err = parse(bad).err().unwrap_or_else(|| panic!("{bad:?} parses"));
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
        for bad in [
            &["run", "--compact-at", "0", "hi"][..],
            &["run", "--compact-at=1.5", "hi"],
            &["run", "--compact-at", "x", "hi"],
        ] {
            assert_eq!(parse(bad).err().map(|e| e.exit_code()), Some(2), "{bad:?}");
        }
        assert_eq!(parse(&["run", "--max-tool-result-bytes", "10", "hi"]).err().map(|e| e.exit_code()), Some(2));
        let Ok(Cli { command: Command::Run(r) }) = parse(&["run", "hi"]) else { panic!("run parses") };
        assert_eq!((r.compact_at, r.context_window, r.max_tool_result_bytes), (0.8, None, None));
        let Ok(Cli { command: Command::Run(r) }) =
            parse(&["run", "--context-window", "9000", "--compact-at=0.6", "--max-tool-result-bytes", "4096", "hi"])
        else {
            panic!("run parses")
        };
        assert_eq!((r.compact_at, r.context_window, r.max_tool_result_bytes), (0.6, Some(9000), Some(4096)));
        let Ok(Cli { command: Command::Run(r) }) =
            parse(&["run", "--count-margin", "0.2", "--responses-compact-at", "50000", "hi"])
        else {
            panic!("run parses")
        };
        assert_eq!((r.count_margin, r.responses_compact_at), (Some(0.2), Some(50_000)));
        assert_eq!(parse(&["run", "--count-margin", "2", "hi"]).err().map(|e| e.exit_code()), Some(2));
        let err = parse(&["run", "--jsn", "hi"]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("--json"), "a near flag is suggested: {err}");
        let err = parse(&["run", "--style", "anthropik", "hi"]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("anthropic"), "the styles are listed: {err}");
        let help = parse(&["run", "--help"]).err().map(|e| e.kind());
        assert_eq!(help, Some(ErrorKind::DisplayHelp));
    }
}
