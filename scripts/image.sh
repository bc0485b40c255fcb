#!/usr/bin/env bash
# Builds the xce image with docker or podman, whichever runs here.
#   IMAGE   the image's name (default xce:$VERSION)
#   VERSION the version stamped into the binary (default: git describe)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${VERSION:-$(git describe --always --dirty 2>/dev/null || echo dev)}
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
image=${IMAGE:-xce:$version}

runtime=""
for r in docker podman; do
	if command -v "$r" >/dev/null 2>&1 && "$r" info >/dev/null 2>&1; then
		runtime=$r
		break
	fi
done
if [ -z "$runtime" ]; then
	echo "make image: no container runtime runs here (docker or podman, with its daemon or service up); nothing built" >&2
	exit 1
fi
"$runtime" build --build-arg VERSION="$version" --build-arg COMMIT="$commit" --build-arg DATE="$date" -t "$image" .
echo "built $image with $runtime"
