#!/usr/bin/env bash
# Builds etcd and etcd's `benchmark` tool from etcd's own Go modules, for
# scripts/compare-etcd.sh:
#
#   scripts/etcd-tools.sh            (or `make etcd-tools`)
#   ETCD_VERSION=v3.7.3 scripts/etcd-tools.sh
#
# Both land in .tools/etcd-$ETCD_VERSION/ (default v3.7.1, the version the
# comparison quotes); a directory that already holds both of that version is
# left as it is. The sources come through the Go module proxy, like any
# dependency: `etcd` from go.etcd.io/etcd/server/v3 and `benchmark` from
# tools/benchmark in the root module go.etcd.io/etcd/v3. Their go.mod files
# point etcd's sibling modules at paths of the full source tree
# (`replace go.etcd.io/etcd/api/v3 => ../api`), which a module download does
# not have, so each module is copied to a temp dir, those replace directives
# are dropped, and the siblings are taken at the same version from the proxy.
set -euo pipefail

version=${ETCD_VERSION:-v3.7.1}
cd "$(dirname "$0")/.."
dest=$PWD/.tools/etcd-$version

# reports VERSION: whether that etcd binary says it is $version.
reports() { [[ $("$1" --version 2>/dev/null | head -n 1) == "etcd Version: ${version#v}" ]]; }

if [[ -x $dest/etcd && -x $dest/benchmark ]] && reports "$dest/etcd"; then
	echo "etcd $version tools present in $dest"
	exit 0
fi

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# download MODULE: the module's source dir in the module cache, or a clear
# error naming what the proxy said.
download() {
	local out dir
	if ! out=$(GOFLAGS=-mod=mod go mod download -json "$1@$version" 2>&1); then
		echo "cannot fetch $1@$version through the Go module proxy ($(go env GOPROXY)):" >&2
		sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' <<<"$out" | sed 's/\\n\\t/\n\t/g' >&2
		[[ $out == *'"Error"'* ]] || echo "$out" >&2
		echo "pick a served version with ETCD_VERSION=... (see: go list -m -versions $1)" >&2
		exit 1
	fi
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$out")
	[[ -d $dir ]] || { echo "go mod download gave no source dir for $1@$version" >&2; exit 1; }
	echo "$dir"
}

# build MODULE PACKAGE OUTPUT: builds PACKAGE (relative to the module's root)
# from a writable copy of the module without its local replace directives.
build() {
	local src copy old
	src=$(download "$1")
	copy=$work/$(basename "$(dirname "$src")")-$(basename "$src")
	cp -r "$src" "$copy"
	chmod -R u+w "$copy"
	rm -f "$copy/go.work" "$copy/go.work.sum"
	# `replace a => ./dir` or `../dir`, alone or inside a replace ( ... ) block.
	awk '{ sub(/^replace[[:space:]]+/, "") } $2 == "=>" && $3 ~ /^\.\.?\// { print $1 }' "$copy/go.mod" |
		while read -r old; do (cd "$copy" && go mod edit -dropreplace="$old"); done
	echo "building $3 from $1@$version"
	(cd "$copy" && GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -o "$work/bin/$3" "$2")
}

mkdir -p "$work/bin"
build go.etcd.io/etcd/server/v3 . etcd
build go.etcd.io/etcd/v3 ./tools/benchmark benchmark
reports "$work/bin/etcd" || {
	echo "the built etcd does not report version $version:" >&2
	"$work/bin/etcd" --version >&2
	exit 1
}
mkdir -p "$dest"
mv "$work/bin/etcd" "$work/bin/benchmark" "$dest/"
echo "etcd $version tools built in $dest"
