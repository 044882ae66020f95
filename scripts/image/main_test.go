package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestImage: the tarball written from a binary and a CA bundle reads back,
// as docker load and crane push read it, as an image that runs ratelab as
// a user other than root, and holds the binary (executable), the
// certificates and a /tmp anyone may write to.
func TestImage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin, certs, out := filepath.Join(dir, "ratelab"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "image.tar")
	fakeBinary := fakeELF(t, elf.EM_AARCH64, false)
	fakeCerts := []byte("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")
	if err := os.WriteFile(bin, fakeBinary, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certs, fakeCerts, 0o644); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	if err := run(bin, certs, out, "v1.2.3", "0123456789abcdef", created); err != nil {
		t.Fatal(err)
	}

	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"ratelab:v1.2.3"}) {
		t.Fatalf("manifest.json %+v: want one image, tagged ratelab:v1.2.3", manifest)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	// What crane validate checks: every digest and size, the config's rootfs.
	if err := validate.Image(img); err != nil {
		t.Fatalf("not a valid image: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/ratelab"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %q; want /ratelab alone", c.Entrypoint, c.Cmd)
	}
	uid, gid, _ := strings.Cut(c.User, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("user %q: want a numeric uid other than root's", c.User)
	}
	if n, err := strconv.Atoi(gid); err != nil || n == 0 {
		t.Errorf("user %q: want a numeric gid other than root's", c.User)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" || !cf.Created.Time.Equal(created) {
		t.Errorf("platform %s/%s created %s; want linux/arm64 (the binary's) at %s", cf.OS, cf.Architecture, cf.Created, created)
	}
	for k, want := range map[string]string{"org.opencontainers.image.version": "v1.2.3", "org.opencontainers.image.revision": "0123456789abcdef"} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}

	type entry struct {
		mode int64
		dir  bool
		body []byte
	}
	files := map[string]entry{}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if h.Uid != 0 || h.Gid != 0 {
				t.Errorf("%s is owned by %d:%d, want root's (the user cannot change the image's files)", h.Name, h.Uid, h.Gid)
			}
			files[strings.TrimSuffix(h.Name, "/")] = entry{mode: h.Mode, dir: h.Typeflag == tar.TypeDir, body: body}
		}
		rc.Close()
	}
	if len(layers) != 2 {
		t.Errorf("%d layers, want 2: the certificates and /tmp, then ratelab", len(layers))
	}
	for path, want := range map[string]entry{
		"ratelab":                           {mode: 0o755, body: fakeBinary},
		"etc/ssl/certs/ca-certificates.crt": {mode: 0o644, body: fakeCerts},
		"tmp":                               {mode: 0o1777, dir: true, body: []byte{}},
	} {
		got, ok := files[path]
		if !ok {
			t.Errorf("the image has no /%s", path)
			continue
		}
		if got.mode != want.mode || got.dir != want.dir || !bytes.Equal(got.body, want.body) {
			t.Errorf("/%s: mode %o, dir %v, %d bytes; want %o, %v, %d bytes", path, got.mode, got.dir, len(got.body), want.mode, want.dir, len(want.body))
		}
	}

	// The same inputs make the same image, byte for byte.
	again := filepath.Join(dir, "again.tar")
	if err := run(bin, certs, again, "v1.2.3", "0123456789abcdef", created); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("two builds from the same inputs differ")
	}
}

// TestStaticArch: only a static Linux executable goes into the image, and
// its machine names the image's architecture.
func TestStaticArch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		binary []byte
		arch   string
		err    string
	}{
		{fakeELF(t, elf.EM_X86_64, false), "amd64", ""},
		{fakeELF(t, elf.EM_AARCH64, false), "arm64", ""},
		{fakeELF(t, elf.EM_X86_64, true), "", "dynamically linked"},
		{fakeELF(t, elf.EM_SPARCV9, false), "", "EM_SPARCV9"},
		{[]byte("#!/bin/sh\necho ratelab\n"), "", "not an ELF executable"},
	} {
		arch, err := staticArch(tc.binary)
		if arch != tc.arch || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("staticArch = %q, %v; want %q and an error saying %q", arch, err, tc.arch, tc.err)
		}
	}
	if err := run("/nonexistent", "/nonexistent", filepath.Join(t.TempDir(), "x.tar"), "", "", time.Time{}); err == nil ||
		!strings.Contains(err.Error(), "-version is required") {
		t.Errorf("no -version: %v", err)
	}
}

// fakeELF is the headers of a 64-bit little-endian executable for machine,
// with a dynamic loader (PT_INTERP) when dynamic.
func fakeELF(t *testing.T, machine elf.Machine, dynamic bool) []byte {
	t.Helper()
	progs := []elf.Prog64{{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X)}}
	if dynamic {
		progs = append([]elf.Prog64{{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R)}}, progs...)
	}
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: uint16(len(progs)),
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	if err := binary.Write(&b, binary.LittleEndian, progs); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
