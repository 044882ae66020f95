package rls_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3" // the Any types of docs/envoy.md's bootstrap
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelab/ratelab/rls"
)

// docBlock returns the fenced yaml block of docs/envoy.md whose first line
// is "# name".
func docBlock(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "envoy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n# "+name+"\n")
	if !ok {
		t.Fatalf("docs/envoy.md has no yaml block beginning # %s", name)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("docs/envoy.md: the block %s does not end", name)
	}
	return block
}

// validateAll runs the validation generated from Envoy's protos on m (when
// whole: the root, or a message packed in an Any) and on every message
// packed in an Any within it (typed_config), as Envoy validates each when
// it loads them. A message's validation covers the messages it holds, but
// not what their Anys pack.
func validateAll(t *testing.T, m protoreflect.Message, path string, whole bool) {
	t.Helper()
	if v, ok := m.Interface().(interface{ ValidateAll() error }); ok && whole {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind {
			return true
		}
		each := func(msg protoreflect.Message, at string) {
			a, packed := msg.Interface().(*anypb.Any)
			if packed {
				inner, err := a.UnmarshalNew()
				if err != nil {
					t.Errorf("%s: %v", at, err)
					return
				}
				msg = inner.ProtoReflect()
			}
			validateAll(t, msg, at, packed)
		}
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				each(v.List().Get(i).Message(), path+"."+string(fd.Name()))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					each(mv.Message(), path+"."+string(fd.Name())+"["+k.String()+"]")
				}
				return true
			})
		default:
			each(v.Message(), path+"."+string(fd.Name()))
		}
		return true
	})
}

// TestEnvoyDocTLSCluster: docs/envoy.md's cluster that reaches the
// service over TLS loads into Envoy's v3 Cluster, every field known, and
// passes its validation; its transport socket is an UpstreamTlsContext
// that asks for h2, with a CA to verify the service and a client
// certificate.
func TestEnvoyDocTLSCluster(t *testing.T) {
	var doc any
	if err := yaml.Unmarshal([]byte(docBlock(t, "ratelab_rls_tls.yaml")), &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var c clusterv3.Cluster
	if err := protojson.Unmarshal(js, &c); err != nil {
		t.Fatalf("the cluster does not load into Envoy's types: %v", err)
	}
	validateAll(t, c.ProtoReflect(), "cluster", true)
	var tc tlsv3.UpstreamTlsContext
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&tc); err != nil {
		t.Fatalf("transport_socket: %v", err)
	}
	ctx := tc.GetCommonTlsContext()
	if tc.GetSni() == "" || len(ctx.GetAlpnProtocols()) != 1 || ctx.GetAlpnProtocols()[0] != "h2" ||
		ctx.GetValidationContext().GetTrustedCa().GetFilename() == "" || len(ctx.GetTlsCertificates()) != 1 {
		t.Errorf("UpstreamTlsContext %v: want an SNI, ALPN h2, a trusted CA and a client certificate", &tc)
	}
}

// TestEnvoyDocConfig: the Envoy bootstrap of docs/envoy.md loads into
// Envoy's v3 types, every field known (the rate limit filter, the route's
// actions, the cluster's HTTP/2 options, each typed_config), and passes
// their validation; and the service's file beside it, served, gives each
// descriptor the actions build the limit its comment names.
func TestEnvoyDocConfig(t *testing.T) {
	var doc any
	if err := yaml.Unmarshal([]byte(docBlock(t, "envoy.yaml")), &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("the bootstrap does not load into Envoy's types: %v", err)
	}
	validateAll(t, b.ProtoReflect(), "bootstrap", true)
	if n := len(b.GetStaticResources().GetClusters()); n != 2 {
		t.Errorf("%d clusters, want ratelab_rls and backend", n)
	}

	file := strings.Replace(docBlock(t, "edge_proxy.yaml"), "domain: edge_proxy", "domain: "+testDomain+"edge_proxy", 1)
	s := startRLS(t, map[string]string{"edge_proxy.yaml": file}, rls.Config{})
	const (
		second = pb.RateLimitResponse_RateLimit_SECOND
		minute = pb.RateLimitResponse_RateLimit_MINUTE
	)
	// A POST from 10.0.0.1 by alice on the gold plan: the four descriptors
	// the four rate_limits entries build.
	checkResp(t, s.call(t, "edge_proxy", 0,
		desc("generic_key", "api"),
		desc("remote_address", "10.0.0.1"),
		desc("plan", "gold", "user", "alice"),
		desc("method", "write", "remote_address", "10.0.0.1")), false,
		st{limit: 1000, unit: second, remaining: 999},
		st{limit: 50, unit: second, remaining: 49},
		st{limit: 600, unit: minute, remaining: 19}, // the rate; remaining counts down from the burst of 20
		st{limit: 20, unit: minute, remaining: 19})
	resp := s.call(t, "edge_proxy", 0, desc("remote_address", "10.0.0.2"), desc("plan", "free", "user", "bob"))
	checkResp(t, resp, false, st{limit: 50, unit: second, remaining: 49}, st{limit: 60, unit: minute, remaining: 59})
	if m := resp.GetStatuses()[0].GetCurrentLimit().GetUnitMultiplier().GetValue(); m != 10 {
		t.Errorf("remote_address's window of 10s reported with unit_multiplier %d, want 10", m)
	}
}
