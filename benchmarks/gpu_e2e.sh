#!/usr/bin/env bash
# benchmarks/gpu_e2e.py's run on a GPU machine that has PyTorch, onnx and onnxruntime but not eqsat (nor egglog or
# OR-Tools), in two commands:
#
#   bash benchmarks/gpu_e2e.sh prepare EXPORTS   here: the bundle (gpu_bundle/) of TASO's seven graphs, BERT,
#                                                MobileNetV2 and the eight exports in EXPORTS (benchmarks/
#                                                export_dynamic.py's), and the wheels (.whl/: eqsat's, platformdirs')
#   bash benchmarks/gpu_e2e.sh time              there, with gpu_bundle/ and .whl/ beside it: writes the times, the
#                                                GPU's identity and the log into $OUT (or gpu_e2e_out/)
#   python benchmarks/gpu_e2e.py report gpu_bundle OUT/gpu_e2e_times.json   here again: the table
#
# Both folders are ignored by git (add them to .git/info/exclude) and travel with the working tree (about 10 MB).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
  prepare)
    exports="${2:?give the folder of the exports benchmarks/export_dynamic.py wrote}"
    py=.venv/bin/python
    rm -rf gpu_bundle .whl
    mkdir -p .whl
    "$py" -m pip wheel --quiet --no-deps --no-build-isolation . -w .whl
    "$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux2014_x86_64 -d .whl "platformdirs==$("$py" -c 'import platformdirs; print(platformdirs.__version__)')"
    "$py" benchmarks/gpu_e2e.py prepare taso_bert taso_nasrnn taso_resnext50 taso_nasnet_a taso_inception_v3 \
      taso_squeezenet taso_vgg19 hf_bert mobilenet_v2 \
      "$exports"/{bert,gpt2,llama,vit}_{dynamo,ts}.onnx \
      --measured benchmarks/results/gpu_measured_h200.json benchmarks/results/gpu_measured_h200_exports.json \
      --bundle gpu_bundle --dims batch=1,sequence=128
    ;;
  time)
    out="${OUT:-gpu_e2e_out}"
    mkdir -p "$out"
    python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/eqsat-site .whl/*.whl
    export PYTHONPATH=/tmp/eqsat-site PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$out/gpu.txt" || true
    status=0
    timeout "${E2E_TIMEOUT:-430}" python3 benchmarks/gpu_e2e.py time gpu_bundle --out "$out/gpu_e2e_times.json" \
      --device cuda --budget 0.25 > "$out/log.txt" 2>&1 || status=$?
    grep -v '^{' "$out/log.txt" | tail -20
    echo "time step exited $status"
    exit "$status"
    ;;
  *)
    echo "usage: bash benchmarks/gpu_e2e.sh prepare EXPORTS | time" >&2
    exit 2
    ;;
esac
