package auth

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// LoadTokens reads a tokens file (see ParseTokens); an error names the
// file and the line.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth.tokens_file: %w", err)
	}
	t, err := ParseTokens(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("auth.tokens_file %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens reads a tokens file: one entry a line,
//
//	<sha256 of the token, 64 hex digits> <principal> <role>[,<role>…]
//
// with blank lines and lines starting with # ignored. A hash of "-" gives
// roles to the principal of a client certificate without a token. A line
// that is not of this form, names an unknown role, or repeats a hash is an
// error naming the line; the error never quotes a hash.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{roles: map[string][]Role{}}
	seen := map[[32]byte]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want \"<sha256 hex> <principal> <role>[,<role>...]\", got %d fields", n, len(f))
		}
		var roles []Role
		for _, s := range strings.Split(f[2], ",") {
			r, err := ParseRole(s)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			if !containsRole(roles, r) {
				roles = append(roles, r)
			}
		}
		principal := f[1]
		for _, r := range roles {
			if !containsRole(t.roles[principal], r) {
				t.roles[principal] = append(t.roles[principal], r)
			}
		}
		if f[0] == "-" {
			continue
		}
		if len(f[0]) != 64 {
			return nil, fmt.Errorf("line %d: the hash is not 64 hex digits (the sha256 of the token, as sha256sum prints it)", n)
		}
		var h [32]byte
		if _, err := hex.Decode(h[:], []byte(f[0])); err != nil {
			return nil, fmt.Errorf("line %d: the hash is not 64 hex digits (the sha256 of the token, as sha256sum prints it)", n)
		}
		if prev, ok := seen[h]; ok {
			return nil, fmt.Errorf("line %d: the same token as line %d", n, prev)
		}
		seen[h] = n
		t.entries = append(t.entries, token{hash: h, principal: principal, roles: roles})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return t, nil
}

func containsRole(rs []Role, r Role) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}
