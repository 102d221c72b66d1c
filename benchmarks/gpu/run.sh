#!/usr/bin/env bash
# The GPU kit: installs the carried wheels (benchmarks/gpu/build_wheels.py) offline, then runs each PART with its
# own time budget, writing OUT/<part>.json, OUT/run.json and OUT/run.log. See benchmarks/gpu/README.md.
#
#   OUT=DIR bash benchmarks/gpu/run.sh [--dry-run] PART...
#
# PART: correct learn speed profile memory auto int8 sequence (or all). --dry-run: every part at tiny size on the CPU (CI runs it).
# Environment: OUT (default out/gpu), WORK (scratch, default /tmp/wantrainer-gpu-kit), PY (default: the repo's
# .venv if present, else python3), PART_SECONDS (each part's budget; default 510, dry run 150), BUDGET_<part>
# (one part's budget, e.g. BUDGET_correct=330), SPEED_MODELS (speed: "13b 14b8 5b"), WHEELS (.whl),
# DRY_INSTALL=1 (the dry run installs the wheels too, into WORK/site, as on the GPU machine).
set -u
cd "$(dirname "$0")/../.."
DRY=()
PARTS=()
for arg in "$@"; do
    case $arg in
    --dry-run) DRY=(--dry-run) ;;
    all) PARTS+=(correct learn speed profile memory auto int8 sequence) ;;
    correct | learn | speed | profile | memory | auto | int8 | sequence) PARTS+=("$arg") ;;
    *) echo "usage: OUT=DIR bash benchmarks/gpu/run.sh [--dry-run] correct|learn|speed|profile|memory|auto|int8|sequence|all ..." >&2
       exit 2 ;;
    esac
done
[ ${#PARTS[@]} -gt 0 ] || { echo "run.sh: name at least one part (or all)" >&2; exit 2; }
OUT=${OUT:-out/gpu}
WORK=${WORK:-/tmp/wantrainer-gpu-kit}
WHEELS=${WHEELS:-.whl}
if [ -z "${PY:-}" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
SECONDS_PER_PART=${PART_SECONDS:-$([ ${#DRY[@]} -gt 0 ] && echo 150 || echo 510)}
mkdir -p "$OUT" "$WORK"
LOG=$OUT/run.log
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
say() { echo "run.sh: $*" | tee -a "$LOG"; }

say "parts: ${PARTS[*]} ${DRY[*]}; python $($PY -c 'import sys; print(sys.version.split()[0])'); budget ${SECONDS_PER_PART} s a part"
# The wheels: the plan always (it must resolve from requirements.txt and the lock), the folder where there is one.
"$PY" benchmarks/gpu/build_wheels.py --list >>"$LOG" 2>&1 || { say "the wheel plan does not resolve"; exit 1; }
wheels_status=none
if ls "$WHEELS"/*.whl >/dev/null 2>&1 && [ ${#DRY[@]} -gt 0 ] && [ -z "${DRY_INSTALL:-}" ]; then
    # the dry run checks the folder against the plan; installing 42 MiB (a minute on a busy CPU) only if asked
    "$PY" benchmarks/gpu/build_wheels.py --check --folder "$WHEELS" >>"$LOG" 2>&1 && wheels_status=checked \
        || wheels_status=differs
    say "wheels in $WHEELS: $wheels_status against the plan (DRY_INSTALL=1 also installs them)"
elif ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    "$PY" benchmarks/gpu/build_wheels.py --check --folder "$WHEELS" >>"$LOG" 2>&1 || say "wheel folder differs from the plan (see above)"
    SITE=$WORK/site
    rm -rf "$SITE"
    start=$(date +%s)
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$WHEELS"/*.whl >>"$LOG" 2>&1; then
        export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
        if "$PY" -c "import diffusers, av, ftfy, prodigyopt, schedulefree, pytorch_optimizer" >>"$LOG" 2>&1; then
            wheels_status=installed
        else
            wheels_status=import-failed
        fi
    else
        wheels_status=install-failed
    fi
    say "wheels from $WHEELS: $wheels_status ($(( $(date +%s) - start )) s)"
else
    say "no wheels in $WHEELS: the machine's own packages are used (build them: python benchmarks/gpu/build_wheels.py)"
fi

failed=0
results=""
for part in "${PARTS[@]}"; do
    start=$(date +%s)
    say "== part $part"
    set -o pipefail
    budget_name=BUDGET_$part
    budget=${!budget_name:-$SECONDS_PER_PART}
    timeout -k 15 $((budget + 45)) "$PY" benchmarks/gpu/part.py "$part" --out "$OUT" --work "$WORK" \
        --seconds "$budget" "${DRY[@]}" 2>&1 | tee -a "$LOG"
    rc=$?
    set +o pipefail
    say "== part $part: exit $rc in $(( $(date +%s) - start )) s"
    [ $rc -eq 0 ] || failed=1
    results="$results\"$part\": {\"rc\": $rc, \"seconds\": $(( $(date +%s) - start ))}, "
done
echo "{${results}\"wheels\": \"$wheels_status\", \"dry_run\": $([ ${#DRY[@]} -gt 0 ] && echo true || echo false)}" >"$OUT/run.json"
exit $failed
