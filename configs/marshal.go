package configs

import (
	"bytes"
	"os"

	"go.yaml.in/yaml/v3"
)

// Marshal renders c as YAML that Parse reads back into an equal Config.
// Only the settings that differ from Default are written, so a generated
// file shows what it changes; a list that is empty in both is left out.
func Marshal(c *Config) ([]byte, error) {
	var doc, def yaml.Node
	if err := doc.Encode(c); err != nil {
		return nil, err
	}
	d := Default()
	if err := def.Encode(&d); err != nil {
		return nil, err
	}
	prune(&doc, &def)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteFile writes c to path (see Marshal).
func WriteFile(path string, c *Config) error {
	b, err := Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// prune drops from the mapping n every key whose value equals the one in
// def, recursing into mappings present in both, and drops empty lists.
func prune(n, def *yaml.Node) {
	defs := map[string]*yaml.Node{}
	for i := 0; i+1 < len(def.Content); i += 2 {
		defs[def.Content[i].Value] = def.Content[i+1]
	}
	kept := n.Content[:0]
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		dv := defs[k.Value]
		switch {
		case v.Kind == yaml.SequenceNode && len(v.Content) == 0:
			continue
		case dv != nil && sameNode(v, dv):
			continue
		case dv != nil && v.Kind == yaml.MappingNode && dv.Kind == yaml.MappingNode:
			prune(v, dv)
			if len(v.Content) == 0 {
				continue
			}
		}
		kept = append(kept, k, v)
	}
	n.Content = kept
}

func sameNode(a, b *yaml.Node) bool {
	if a.Kind != b.Kind || a.Value != b.Value || a.Tag != b.Tag || len(a.Content) != len(b.Content) {
		return false
	}
	for i := range a.Content {
		if !sameNode(a.Content[i], b.Content[i]) {
			return false
		}
	}
	return true
}
