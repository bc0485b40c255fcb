package localcluster

import (
	"fmt"
	"path/filepath"

	"github.com/xce/xce/configs"
)

// AddNode lays out one more node, n<N+1>, on free loopback ports, to join
// the running cluster: its config lists only itself in peers and joins
// through join (client addresses of members). It starts nothing; Start
// starts it. On a secured cluster it gets its own node certificate.
func (c *Cluster) AddNode(join []string) (int, error) {
	if len(join) == 0 {
		return 0, fmt.Errorf("add node: no join addresses")
	}
	ports, err := FreePorts(2)
	if err != nil {
		return 0, err
	}
	i := len(c.Nodes)
	id := fmt.Sprintf("n%d", i+1)
	nd := &Node{
		Index: i, ID: id,
		ClientAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		PeerAddr:   fmt.Sprintf("127.0.0.1:%d", ports[1]),
		DataDir:    filepath.Join(c.opts.Dir, "data", id),
		ConfigPath: filepath.Join(c.opts.Dir, id+".yaml"),
		LogPath:    filepath.Join(c.opts.LogDir, id+".log"),
		Join:       append([]string(nil), join...),
	}
	if c.opts.PidFiles {
		nd.PidFile = filepath.Join(c.opts.Dir, id+".pid")
	}
	c.Nodes = append(c.Nodes, nd)
	if c.opts.secured() {
		if err := c.secure(); err != nil {
			c.Nodes = c.Nodes[:i]
			return 0, fmt.Errorf("certificates of %s: %w", id, err)
		}
	}
	cfg := c.Config(i)
	if err := configs.WriteFile(nd.ConfigPath, &cfg); err != nil {
		c.Nodes = c.Nodes[:i]
		return 0, err
	}
	return i, nil
}
