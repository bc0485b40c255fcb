#!/usr/bin/env bash
# Installs a headless browser for the console's browser tests (ui package):
# Debian's chromium, when no chromium is on the PATH. Needs root (CI runs as
# root) and apt; elsewhere it says what is missing and the tests that need
# a browser skip with the same message.
set -euo pipefail
for b in chromium chromium-browser google-chrome; do
	if command -v "$b" >/dev/null; then
		echo "chromium: $(command -v "$b") ($("$b" --version 2>/dev/null || echo "version unknown"))"
		exit 0
	fi
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "chromium: not installed, and installing it needs root and apt-get (apt-get install chromium); the browser tests will skip" >&2
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || echo "chromium: apt-get update failed; trying the package lists at hand" >&2
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "chromium: installed $(chromium --version)"
