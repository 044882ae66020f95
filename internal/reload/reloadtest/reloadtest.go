// Package reloadtest lays out, in tests, a directory as the kubelet lays out
// a ConfigMap volume, and updates it as the kubelet does.
package reloadtest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ConfigMap is a directory laid out as the kubelet's AtomicWriter lays out a
// ConfigMap volume: each key a link, name -> ..data/name; ..data a link to a
// timestamped directory (..2026_12_04_10_58_01.123456789) that holds the
// files.
type ConfigMap struct {
	// Dir is the volume's directory.
	Dir string
	t   testing.TB
}

// NewConfigMap writes files (name -> content) into dir as a ConfigMap
// volume is first written.
func NewConfigMap(t testing.TB, dir string, files map[string]string) *ConfigMap {
	t.Helper()
	c := &ConfigMap{Dir: dir, t: t}
	c.Update(files)
	return c
}

// Update replaces the volume's files by files as the kubelet does: a new
// timestamped directory holds them, a new link ..data_tmp to it is renamed
// over ..data, the links of the keys that are gone are removed, and so is
// the old directory. No event names a file of the volume.
func (c *ConfigMap) Update(files map[string]string) {
	c.t.Helper()
	data := filepath.Join(c.Dir, "..data")
	old, err := os.Readlink(data)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.t.Fatal(err)
	}
	ts, err := os.MkdirTemp(c.Dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		c.t.Fatal(err)
	}
	c.check(os.Chmod(ts, 0o755))
	for name, src := range files {
		c.check(os.WriteFile(filepath.Join(ts, name), []byte(src), 0o644))
	}
	tmp := filepath.Join(c.Dir, "..data_tmp")
	c.check(os.Symlink(filepath.Base(ts), tmp))
	c.check(os.Rename(tmp, data))
	for name := range files {
		link := filepath.Join(c.Dir, name)
		if _, err := os.Readlink(link); errors.Is(err, fs.ErrNotExist) {
			c.check(os.Symlink(filepath.Join("..data", name), link))
		}
	}
	if old == "" {
		return
	}
	ents, err := os.ReadDir(filepath.Join(c.Dir, old))
	c.check(err)
	for _, e := range ents {
		if _, ok := files[e.Name()]; !ok {
			c.check(os.Remove(filepath.Join(c.Dir, e.Name())))
		}
	}
	c.check(os.RemoveAll(filepath.Join(c.Dir, old)))
}

func (c *ConfigMap) check(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}
