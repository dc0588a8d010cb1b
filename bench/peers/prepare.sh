#!/usr/bin/env bash
# On the dev machine (network to PyPI): fetch the llama-cpp-python sdist and the gguf wheel, and pack the
# llama.cpp sources the two benchmark targets need into .peers/ (git-ignored; carried to the GPU machine).
#   bash bench/peers/prepare.sh            then, on the GPU machine (carry .peers):
#   pip install --no-index --no-deps --target /tmp/site .peers/whl/*.whl && PYTHONPATH=/tmp/site:$PWD \
#     python3 bench/peers/run.py --out $OUT [--products]
set -euo pipefail
VERSION=0.3.36
ROOT=$(git rev-parse --show-toplevel)
cd "$ROOT"
grep -qx '/.peers/' .git/info/exclude 2>/dev/null || echo '/.peers/' >> .git/info/exclude
TMP=$(mktemp -d)
python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$TMP"
tar xzf "$TMP/llama_cpp_python-$VERSION.tar.gz" -C "$TMP"
SRC="$TMP/llama_cpp_python-$VERSION/vendor/llama.cpp"
# what the CUDA build of llama-bench + llama-batched-bench does not read (models/ alone is 75 MB)
rm -rf "$SRC"/{models,docs,media,tools/ui,gguf-py,conversion,benches,tests,examples,pocs,skills,.github} \
       "$SRC"/{scripts,ci,requirements,grammars}
for b in opencl sycl vulkan hexagon metal et webgpu openvino cann virtgpu zdnn musa blas kompute rpc zendnn; do
  rm -rf "$SRC/ggml/src/ggml-$b"
done
mkdir -p .peers/whl
tar cf - -C "$(dirname "$SRC")" llama.cpp | xz -T0 -6 > .peers/llama.cpp-src.tar.xz
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .peers/whl gguf==0.19.0
rm -rf "$TMP"
du -sh .peers/*
