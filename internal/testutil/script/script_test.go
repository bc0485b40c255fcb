package script

import (
	"reflect"
	"testing"
)

func TestParseCommand(t *testing.T) {
	name, a, err := ParseCommand(`grant m1 at=10 note="two words" "quoted word"`)
	if err != nil {
		t.Fatal(err)
	}
	if name != "grant" {
		t.Fatalf("name %q", name)
	}
	if !reflect.DeepEqual(a.Words, []string{"m1", "quoted word"}) {
		t.Fatalf("words %q", a.Words)
	}
	if a.KV["at"] != "10" || a.KV["note"] != "two words" {
		t.Fatalf("kv %q", a.KV)
	}
	if n, err := a.Int("at", 0); err != nil || n != 10 {
		t.Fatalf("Int(at) = %d, %v", n, err)
	}
	if n, err := a.Int("missing", 7); err != nil || n != 7 {
		t.Fatalf("Int(missing) = %d, %v", n, err)
	}
	if _, err := a.Int("note", 0); err == nil {
		t.Fatal("Int of a word: no error")
	}
}

func TestParseRefusesBadScripts(t *testing.T) {
	if _, _, err := parse("x.txt", "cmd\nno separator\n"); err == nil {
		t.Fatal("a command without ---- parsed")
	}
	if _, _, err := ParseCommand(`cmd "unterminated`); err == nil {
		t.Fatal("an unterminated quote parsed")
	}
}

func TestParseKeepsCommentsAndOutput(t *testing.T) {
	blocks, trailer, err := parse("x.txt", "# a\ncmd one\n----\nout 1\nout 2\n\n# end\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].want != "out 1\nout 2" || blocks[0].pre[0] != "# a" {
		t.Fatalf("blocks %+v", blocks)
	}
	if len(trailer) != 2 || trailer[1] != "# end" {
		t.Fatalf("trailer %q", trailer)
	}
}
