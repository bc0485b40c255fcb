#!/usr/bin/env bash
# Builds the release binaries into dist/: linux and darwin, amd64 and
# arm64, each static with its version, commit and build date stamped;
# SHA256SUMS over them; and RELEASE_NOTES.md, the version's section of
# CHANGELOG.md (or its Unreleased section).
#   VERSION  the version (default: git describe)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
version=${VERSION:-$(git describe --always --dirty 2>/dev/null || echo dev)}
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w -X main.version=$version -X main.commit=$commit -X main.date=$date"

rm -rf dist
mkdir -p dist
for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os=${target%/*}
	arch=${target#*/}
	out="dist/xce-$version-$os-$arch"
	echo "building $out"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -ldflags "$ldflags" -o "$out" ./cmd/xce
done
(cd dist && sha256sum xce-* > SHA256SUMS)

# The changelog's section for this version, else its Unreleased one.
notes=$(awk -v v="## $version" '
	$0 == v || index($0, v " ") == 1 { on = 1; print; next }
	on && /^## / { exit }
	on { print }' CHANGELOG.md)
if [ -z "$notes" ]; then
	notes=$(awk '
		/^## Unreleased/ { on = 1; print; next }
		on && /^## / { exit }
		on { print }' CHANGELOG.md)
fi
if [ -z "$notes" ]; then
	echo "CHANGELOG.md has no section for $version nor an Unreleased one" >&2
	exit 1
fi
printf '%s\n' "$notes" > dist/RELEASE_NOTES.md
echo "dist/: $(ls dist | wc -l) files; sums in dist/SHA256SUMS, notes in dist/RELEASE_NOTES.md"
