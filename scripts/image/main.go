// Command image writes ratelab's container image (make image): a static
// ratelab (CGO_ENABLED=0) and Debian's CA certificates on an empty base, as
// a tarball in docker save's format, which both `docker load` and
// `crane push` take. It needs no container daemon and pulls no base image.
//
// The image is for load machines (bench http, report merge; see
// docs/distributed.md): redis-server is not in it, so the commands that
// start a private Redis need --redis there. It runs as 65532:65532, not
// root, with ratelab as its entrypoint, and a /tmp anyone may write to.
//
//	go run ./scripts/image -binary bin/ratelab-linux -version v1.2.3 -commit abc… -out bin/ratelab-image.tar
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Where things are in the image.
const (
	binaryPath = "ratelab"
	certsPath  = "etc/ssl/certs/ca-certificates.crt"
	// user is nobody's in distroless images: no root, and a number, so that
	// Kubernetes' runAsNonRoot can check it without an /etc/passwd.
	user = "65532:65532"
)

// spec is what an image is built from.
type spec struct {
	Binary []byte // ratelab, static, for linux
	Arch   string // GOARCH of Binary
	Certs  []byte // the CA bundle, PEM
	// Version and Commit label the image; Created dates it and every file
	// in it, so that one commit's image is the same bytes wherever built.
	Version, Commit string
	Created         time.Time
}

func main() {
	binary := flag.String("binary", "bin/ratelab-linux", "the static ratelab to put in the image (CGO_ENABLED=0 GOOS=linux)")
	certs := flag.String("certs", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle (Debian's ca-certificates)")
	out := flag.String("out", "bin/ratelab-image.tar", "the image tarball to write")
	version := flag.String("version", "", "ratelab's version: the image's tag and label")
	commit := flag.String("commit", "", "the commit ratelab was built from, for the label")
	epoch := flag.Int64("epoch", 0, "the image's creation time, in seconds since 1970 (the commit's time)")
	flag.Parse()
	if err := run(*binary, *certs, *out, *version, *commit, time.Unix(*epoch, 0).UTC()); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binaryFile, certsFile, out, version, commit string, created time.Time) error {
	if version == "" {
		return errors.New("-version is required: it is the image's tag")
	}
	tag, err := name.NewTag("ratelab:" + version)
	if err != nil {
		return fmt.Errorf("-version %q is no image tag: %w", version, err)
	}
	s := spec{Version: version, Commit: commit, Created: created}
	if s.Binary, err = os.ReadFile(binaryFile); err != nil {
		return err
	}
	if s.Arch, err = staticArch(s.Binary); err != nil {
		return fmt.Errorf("%s: %w", binaryFile, err)
	}
	if s.Certs, err = os.ReadFile(certsFile); err != nil {
		return fmt.Errorf("%w (on Debian: apt-get install ca-certificates)", err)
	}
	img, err := build(s)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return err
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s, linux/%s, %.1f MB, %s\n", out, tag, s.Arch, float64(st.Size())/1e6, digest)
	return nil
}

// build assembles the image: one layer of the CA bundle and /tmp, which
// seldom changes, and one of ratelab, which every version does.
func build(s spec) (v1.Image, error) {
	base, err := layer(s.Created,
		file{path: "etc/", dir: true, mode: 0o755},
		file{path: "etc/ssl/", dir: true, mode: 0o755},
		file{path: "etc/ssl/certs/", dir: true, mode: 0o755},
		file{path: certsPath, mode: 0o644, body: s.Certs},
		// ratelab starts private servers and nginx in temporary directories.
		file{path: "tmp/", dir: true, mode: 0o1777})
	if err != nil {
		return nil, err
	}
	bin, err := layer(s.Created, file{path: binaryPath, mode: 0o755, body: s.Binary})
	if err != nil {
		return nil, err
	}
	// Go reads /etc/ssl/certs/ca-certificates.crt first on Linux: no
	// SSL_CERT_FILE is needed.
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		OS:           "linux",
		Architecture: s.Arch,
		RootFS:       v1.RootFS{Type: "layers"}, // mutate.Append adds each layer's diff_id
		Config: v1.Config{
			Entrypoint: []string{"/" + binaryPath},
			User:       user,
			WorkingDir: "/tmp",
			Labels: map[string]string{
				"org.opencontainers.image.title":       "ratelab",
				"org.opencontainers.image.description": "A lab for Redis rate limiters: bench http from many machines, report merge",
				"org.opencontainers.image.version":     s.Version,
				"org.opencontainers.image.revision":    s.Commit,
				"org.opencontainers.image.created":     s.Created.Format(time.RFC3339),
			},
		},
	})
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: s.Created}, CreatedBy: "make image: CA certificates, /tmp"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: v1.Time{Time: s.Created}, CreatedBy: "make image: ratelab " + s.Version}})
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: s.Created})
}

// file is one entry of a layer.
type file struct {
	path string
	dir  bool
	mode int64
	body []byte
}

// layer is a layer of files owned by root, dated at.
func layer(at time.Time, files ...file) (v1.Layer, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.path, Mode: f.mode, ModTime: at, Typeflag: tar.TypeReg, Size: int64(len(f.body))}
		if f.dir {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	tarred := b.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarred)), nil })
}

// staticArch is the GOARCH of a static Linux executable; anything else is
// an error, since the image has no dynamic loader and no libc.
func staticArch(binary []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable (build ratelab with GOOS=linux): %w", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errors.New("dynamically linked: the image has no libc (build ratelab with CGO_ENABLED=0)")
		}
	}
	arch, ok := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm",
		elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64"}[f.Machine]
	if !ok {
		return "", fmt.Errorf("an executable for %s, which this script cannot name as a GOARCH", f.Machine)
	}
	return arch, nil
}
