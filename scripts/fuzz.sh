#!/usr/bin/env bash
# Runs every checked-in fuzz target (func FuzzXxx in *_test.go) for FUZZTIME each.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-5s}
status=0
while IFS=: read -r file name; do
  pkg="./$(dirname "$file")"
  echo "fuzz $pkg $name ($FUZZTIME)"
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"; then status=1; fi
done < <(grep -rHoE --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)' . | sed -E 's/^\.\///; s/:func /:/' | sort -u)
exit $status
