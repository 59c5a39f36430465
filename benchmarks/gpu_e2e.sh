#!/usr/bin/env bash
# benchmarks/gpu_e2e.py's run on a GPU machine that has PyTorch, onnx and onnxruntime but not eqsat (nor egglog or
# OR-Tools), in two commands:
#
#   bash benchmarks/gpu_e2e.sh prepare EXPORTS CONVNETS
#                                                here: the bundle (gpu_bundle/) of TASO's seven graphs, BERT,
#                                                MobileNetV2 and the eight exports in EXPORTS (benchmarks/
#                                                export_dynamic.py's), ResNeXt-50 regrouped into 16, 8, 4 and 1
#                                                groups, PET's subprograms of CSRNet and ResNet-18 at batch 1 and
#                                                16 in CONVNETS (export_convnets.py's, --image 112), each alone
#                                                and as its cheapest corrected mutant (6 of CSRNet's, the dilated
#                                                first; 4 of ResNet-18's), the operator configurations
#                                                ResNeXt-50's e-graphs price
#                                                (both imports; gpu_bundle/keys_grouped.json), and the wheels
#                                                (.whl/: eqsat's, platformdirs')
#   bash benchmarks/gpu_e2e.sh time              there, with gpu_bundle/ and .whl/ beside it: writes the
#                                                configurations' times, the models' times, the GPU's identity and
#                                                the log into $OUT (or gpu_e2e_out/)
#   python benchmarks/gpu_e2e.py report gpu_bundle OUT/gpu_e2e_times.json --reprice \
#     benchmarks/results/gpu_measured_h200.json,OUT/gpu_measured_grouped.json \
#     --graph-costs OUT/gpu_measured_bundle_20.json                          here again: the tables
#
# Both folders are ignored by git (add them to .git/info/exclude) and travel with the working tree (about 12 MB).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
  prepare)
    exports="${2:?give the folder of the exports benchmarks/export_dynamic.py wrote}"
    convnets="${3:?give the folder of the exports benchmarks/export_convnets.py wrote}"
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
      --bundle gpu_bundle --dims batch=1,sequence=128 --regroup taso_resnext50
    for pet in csrnet_b1:6 csrnet_b16:6 resnet18_b1:4 resnet18_b16:4; do
      "$py" benchmarks/gpu_e2e.py prepare --append --pet "$convnets/${pet%%:*}.onnx" --pet-limit "${pet##*:}" \
        --measured benchmarks/results/gpu_measured_h200.json benchmarks/results/gpu_measured_h200_exports.json \
        --bundle gpu_bundle
    done
    "$py" benchmarks/gpu_replay.py collect taso_resnext50 --keys gpu_bundle/keys_folded.json
    "$py" benchmarks/gpu_replay.py collect taso_resnext50 --as-written --keys gpu_bundle/keys_as_written.json
    "$py" -c 'import json, sys
keys = {json.dumps(k, sort_keys=True) for f in sys.argv[1:] for k in json.load(open(f))}
json.dump([json.loads(k) for k in sorted(keys)], open("gpu_bundle/keys_grouped.json", "w"))
print(len(keys), "configurations of ResNeXt-50 to measure")' gpu_bundle/keys_folded.json gpu_bundle/keys_as_written.json
    ;;
  time)
    out="${OUT:-gpu_e2e_out}"
    mkdir -p "$out"
    python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/eqsat-site .whl/*.whl
    export PYTHONPATH=/tmp/eqsat-site PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$out/gpu.txt" || true
    status=0
    timeout 120 python3 benchmarks/gpu_replay.py measure gpu_bundle/keys_grouped.json \
      --out "$out/gpu_measured_grouped.json" > "$out/measure_log.txt" 2>&1 || status=$?
    tail -3 "$out/measure_log.txt"
    echo "measure step exited $status"
    for replayed in 0 20; do  # the bundle's operators launched from Python, and in CUDA graphs (--graph-costs)
      timeout 120 python3 benchmarks/gpu_replay.py measure gpu_bundle/keys_bundle.json --replayed $replayed \
        --out "$out/gpu_measured_bundle_$replayed.json" >> "$out/measure_log.txt" 2>&1 || status=$?
    done
    timeout "${E2E_TIMEOUT:-430}" python3 benchmarks/gpu_e2e.py time gpu_bundle --out "$out/gpu_e2e_times.json" \
      --device cuda --budget 0.25 > "$out/log.txt" 2>&1 || status=$?
    grep -v '^{' "$out/log.txt" | tail -20
    echo "time step exited $status"
    exit "$status"
    ;;
  *)
    echo "usage: bash benchmarks/gpu_e2e.sh prepare EXPORTS CONVNETS | time" >&2
    exit 2
    ;;
esac
