#!/usr/bin/env bash
# Builds the seed corpora under fuzz/corpus/<target>/ from the wire corpus.
#
#   fuzz/seed.sh [WIRE_CORPUS_DIR]
#
# WIRE_CORPUS_DIR defaults to $NEXUS_SHARED/wire-corpus when NEXUS_SHARED is
# set; otherwise it is found from the repository layout: `shared/wire-corpus`
# beside this checkout or any folder above it, then beside the main checkout
# when this one is a git worktree elsewhere. When none is there, the script
# lists every place it looked. The corpora are generated
# (and git-ignored): re-running adds the seeds again and keeps whatever the
# fuzzer has found since.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# Where the wire corpus may be, in the order tried.
candidates() {
    if [ -n "${NEXUS_SHARED:-}" ]; then
        echo "$NEXUS_SHARED/wire-corpus"
        return
    fi
    # Beside the checkout or any folder above it (a clone next to shared/,
    # or a worktree kept in a folder beside it).
    local dir=$root parent
    while [ "$dir" != / ]; do
        parent=$(dirname "$dir")
        echo "${parent%/}/shared/wire-corpus"
        dir=$parent
    done
    # A git worktree made elsewhere: beside the main checkout.
    local common
    if common=$(git -C "$root" rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
        echo "$(dirname "$(dirname "$common")")/shared/wire-corpus"
    fi
}

if [ $# -ge 1 ]; then
    wire=$1
    looked=("$wire")
else
    wire=
    looked=()
    while IFS= read -r c; do
        looked+=("$c")
        if [ -d "$c" ]; then
            wire=$c
            break
        fi
    done < <(candidates)
fi

if [ -z "$wire" ] || [ ! -d "$wire" ]; then
    echo "seed.sh: no wire corpus found; looked in:" >&2
    printf '  %s\n' "${looked[@]}" >&2
    echo "pass its path (fuzz/seed.sh DIR), or set NEXUS_SHARED to the folder holding wire-corpus/" >&2
    exit 1
fi
wire=$(cd "$wire" && pwd)

corpus="$here/corpus"
n=0
seed() { # seed TARGET FILE [NAME]
    mkdir -p "$corpus/$1"
    cp "$2" "$corpus/$1/${3:-$(basename "$2")}"
    n=$((n + 1))
}

for style in anthropic openai gemini openai-responses; do
    target=${style//-/_}
    for f in "$wire/$style"/*; do
        [ -f "$f" ] || continue
        case "$f" in
            *.expected.json) ;;
            *.sse)
                seed sse "$f" "${target}_$(basename "$f")"
                seed "stream_$target" "$f"
                ;;
            *.json)
                seed "decode_$target" "$f"
                ;;
        esac
        # Translation reads the same bytes as a provider answer to turn back into OpenAI.
        case "$f" in
            *.expected.json) ;;
            *.sse | *.json) seed translate "$f" "${target}_$(basename "$f")" ;;
        esac
    done
done

# OpenAI-shaped requests to translate into the other formats.
for f in "$wire"/*/requests/*.json; do
    if [ -f "$f" ]; then seed translate "$f" "request_$(basename "$f")"; fi
done

# Saved run states: the format fixtures every release keeps.
for f in "$root"/nexus-proto/tests/fixtures/state/*.json; do
    if [ -f "$f" ]; then seed state "$f"; fi
done
# SKILL.md files: the public skills kept as fixtures and the example's.
for f in "$root"/nexus-drive/tests/fixtures/skills/*/*/SKILL.md "$root"/nexus-drive/examples/skills/*/SKILL.md; do
    if [ -f "$f" ]; then seed skill_md "$f" "$(basename "$(dirname "$f")").md"; fi
done
# The machine target reads its script from raw bytes; an empty seed starts it.
mkdir -p "$corpus/machine"
: >"$corpus/machine/empty"
n=$((n + 1))
# So does the MCP session's.
mkdir -p "$corpus/mcp"
: >"$corpus/mcp/empty"
n=$((n + 1))
# And the nested-answers target's (it starts from a saved run tree).
mkdir -p "$corpus/nested_answers"
: >"$corpus/nested_answers/empty"
n=$((n + 1))

# Framing edge cases the recordings do not have: CR-only line ends, a BOM,
# comments, multi-line data, ids, a final event without its blank line.
mkdir -p "$corpus/sse"
printf 'data: a\rdata: b\r\r: keep-alive\r\n\r\nevent: e\nid: 1\ndata\n\n' >"$corpus/sse/edge_line_ends"
printf '\xEF\xBB\xBFdata:x\r\ndata: \xEF\xBB\xBF\r\n\r\nid\ndata: \xE2\x82\xAC' >"$corpus/sse/edge_bom_utf8"
n=$((n + 2))

echo "seed.sh: $n seeds from $wire into $corpus"
