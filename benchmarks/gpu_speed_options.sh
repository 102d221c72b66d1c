#!/usr/bin/env bash
# The GPU measurements of the speed options, in parts that each fit one 10-minute device command:
#
#   OUT=/path/for/json bash benchmarks/gpu_speed_options.sh PART
#
# PART: env | 13b | 13b_compile | 14b | 14b_light | 14b_scaled | experts | 5b | memory | profile
# Every run writes one JSON file under $OUT (default: ./out/gpu_speed_options); an out-of-memory run writes its JSON with
# "status": "oom" and the part goes on. docs/performance.md (its GPU section) says what each file fills in.
set -u
OUT=${OUT:-out/gpu_speed_options}
PY=${PY:-python}
mkdir -p "$OUT"
STEP="$PY benchmarks/gpu_step.py"
SIZE="--size 832x480 --frames 81"

run() {  # name, arguments...
    local name=$1
    shift
    echo "== $name: $*" >&2
    $STEP "$@" --json "$OUT/$name.json" > /dev/null || echo "   ($name exited $?)" >&2
}

case "${1:-}" in
env)  # GPU, driver, torch/diffusers/triton versions, date
    $PY - <<'EOF' > "$OUT/env.json"
import datetime, importlib.metadata as m, json, torch
def version(p):
    try:
        return m.version(p)
    except m.PackageNotFoundError:
        return None
print(json.dumps({"date": datetime.datetime.now().isoformat(timespec="seconds"),
                  "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                  "hip": torch.version.hip, "cuda": torch.version.cuda, "torch": torch.__version__,
                  **{p: version(p) for p in ("diffusers", "peft", "triton", "flash-attn")}}, indent=1))
EOF
    ;;
13b)  # 1.3B LoRA r32, 832x480x81: each training attention backend, eager (goal >= 45 % MFU, <= 12 GiB)
    for backend in NATIVE CUDNN FLASH FLEX; do
        run "13b_${backend}" --model 1.3b $SIZE --checkpointing --attention-backend $backend --steps 5 --warmup 2
    done
    run 13b_nockpt_AUTO --model 1.3b $SIZE --attention-backend AUTO --steps 5 --warmup 2
    ;;
13b_compile)  # the same with compile (warm-up steps include compiling: warmup_times)
    for backend in NATIVE CUDNN FLASH; do
        run "13b_compile_${backend}" --model 1.3b $SIZE --checkpointing --compile --attention-backend $backend \
            --steps 5 --warmup 3
    done
    ;;
14b)  # 14B LoRA r32, 832x480x81, whole model on an 80 GB card, no swap (goal >= 45 % MFU): eager and compiled
    run 14b_ckpt --model 14b $SIZE --checkpointing --steps 3 --warmup 1
    run 14b_ckpt_compile --model 14b $SIZE --checkpointing --compile --steps 3 --warmup 2
    ;;
14b_light)  # 14B with fp8 + block swap + activation offload: the smallest swap that peaks <= 24 GiB, its s/step
    for swap in 10 20 30; do
        run "14b_light_swap${swap}" --model 14b $SIZE --checkpointing --fp8 --blocks-to-swap $swap \
            --activation-offload --steps 2 --warmup 1
    done
    run 14b_light_swap20_buildcpu --model 14b $SIZE --checkpointing --fp8 --blocks-to-swap 20 --activation-offload \
        --steps 2 --warmup 1 --build-on cpu
    ;;
14b_scaled)  # scaled fp8 next to the plain cast (speed and memory; the 14B block stack)
    for scale in NONE TENSOR CHANNEL; do
        run "14b8_fp8_${scale}" --model 14b --layers 8 $SIZE --checkpointing --fp8 --fp8-scale $scale --steps 5 --warmup 2
    done
    ;;
experts)  # two 14B-config experts (first 8 blocks each), BOTH, half the steps each: with and without offload
    run experts_resident --model 14b --layers 8 $SIZE --checkpointing --experts 2 --steps 6 --warmup 2
    run experts_offload --model 14b --layers 8 $SIZE --checkpointing --experts 2 --offload-inactive-expert \
        --steps 6 --warmup 2
    ;;
5b)  # Wan 2.2 TI2V 5B LoRA r32 at 1280x704x121 (48-channel latents, 16x VAE, per-token timesteps): eager, compiled
    run 5b_ckpt --model 5b --size 1280x704 --frames 121 --checkpointing --steps 3 --warmup 1
    run 5b_ckpt_compile --model 5b --size 1280x704 --frames 121 --checkpointing --compile --steps 3 --warmup 2
    ;;
memory)  # the memory-feature table: each combination's peak VRAM and s/step, losses checked against the baseline
    $PY benchmarks/memory_features.py --device cuda --json "$OUT/memory_13b8.json" > /dev/null
    $PY benchmarks/memory_features.py --device cuda --model 14b --layers 4 --size 512x512 \
        --json "$OUT/memory_14b4.json" > /dev/null
    ;;
profile)  # the 1.3B step under torch.profiler (top ops in the JSON, Chrome traces beside), and block swap's overlap
    run profile_13b --model 1.3b $SIZE --checkpointing --steps 2 --warmup 1 --profile "$OUT/profile_13b.trace.json"
    run profile_13b_swap --model 1.3b $SIZE --checkpointing --blocks-to-swap 15 --steps 2 --warmup 1 \
        --profile "$OUT/profile_13b_swap.trace.json"
    ;;
*)
    echo "usage: OUT=DIR bash benchmarks/gpu_speed_options.sh env|13b|13b_compile|14b|14b_light|14b_scaled|experts|5b|memory|profile" >&2
    exit 2
    ;;
esac
