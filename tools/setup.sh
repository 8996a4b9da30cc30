#!/usr/bin/env bash
# Installs the Debian packages inkstone needs, only those missing, and says which.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libtorch-dev            # libtorch 1.13 (CPU)
  libopenblas0-openmp     # optimised BLAS behind libtorch (the reference BLAS is ~35x slower)
  libtomlplusplus-dev libfmt-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev ccache
  libgtest-dev libzstd-dev libgloo-dev libxxhash-dev
  libprotobuf-dev protobuf-compiler  # TensorBoard event files
  libboost-dev            # header-only: CRC-32C of event-file records
  libcairo2-dev           # `inkstone plot`
  fortunes                # the default corpus
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# With both OpenBLAS flavours installed the pthread one wins the alternative and oversubscribes the cores.
blas=$(readlink -f "/usr/lib/$(gcc -print-multiarch)/libblas.so.3" || true)
case "$blas" in
  *openblas-openmp*) echo "setup: BLAS $blas" ;;
  *)
    echo "setup: WARNING libblas.so.3 -> $blas (not OpenBLAS/OpenMP)."
    echo "setup: fix: update-alternatives --set libblas.so.3-$(gcc -print-multiarch) /usr/lib/$(gcc -print-multiarch)/openblas-openmp/libblas.so.3"
    ;;
esac
