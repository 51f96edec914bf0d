# Sourced by the ref-5m KL-divergence scripts (results-int8-attention.sh,
# results-lut.sh) from the repository root: B (turbokv of build dir $1),
# S, M (ref-5m f32), T (WikiText-2 test), a temporary directory removed on
# exit, and $tmp/base: the f32 cache's distributions (-c 512, 40 chunks).
B=${1:-build}/turbokv
S=${TKV_SHARED:-../shared}
M=$S/models/ref-5m/ref-5m-f32.gguf
T=$S/data/text/wikitext-2-raw-test.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$B" perplexity -m "$M" -f "$T" -c 512 --chunks 40 -ctk f32 -ctv f32 --kl-divergence-base "$tmp/base" -t 2 >/dev/null 2>&1
