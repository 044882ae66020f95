package edge_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/rules"
)

// TestOpenRestyInFlight: the nginx module takes the slot in the access
// phase and releases it in the log phase: of N+k concurrent requests held
// by the upstream exactly N reach it, the rest get 429 with the policy as
// concurrent-requests; once they end N more are admitted; a client that
// goes away releases its slot.
func TestOpenRestyInFlight(t *testing.T) {
	needNginx(t)
	const n, k = 3, 2
	set, err := rules.Shorthand{Limits: []string{"1000/1h"}, KeyBy: "header:X-Consumer-Id", InFlight: n, Lease: time.Hour,
		Domain: strings.ReplaceAll(redistest.Prefix(t), ":", "-")}.Set()
	if err != nil {
		t.Fatal(err)
	}
	text, err := edge.RenderRules(set)
	if err != nil {
		t.Fatal(err)
	}
	up := newHeldUpstream()
	us := httptest.NewServer(up)
	defer us.Close()
	nc := startNginxUpstream(t, srv, edge.NginxConfig{Rules: text}, us.URL)
	url := "http://" + nc.Listen + "/"
	alice := newConsumerLoad(t, url, "alice", n)
	alice.holdAtTheLimit(up, n, k)
	key := inFlightKey(t, set, "alice")
	c := client(t, srv.Addr, 5*time.Second)
	// The log phase's release runs in a timer after the response is sent.
	testwait.Eventually(t, 30*time.Second, func() (bool, string) {
		return c.ZCard(context.Background(), key).Val() == 0, "leases left after every request ended"
	})
	alice.admitted(n)

	// A client that goes away: its request, held, releases its slot.
	up2 := newHeldUpstream()
	us2 := httptest.NewServer(up2)
	defer us2.Close()
	nc2 := startNginxUpstream(t, srv, edge.NginxConfig{Rules: text}, us2.URL)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nc2.Listen+"/", nil)
	req.Header.Set("X-Consumer-Id", "bob")
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		if resp, err := httpClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	wait(t, up2.entered, 1, "the request")
	bob := inFlightKey(t, set, "bob")
	if got := c.ZCard(context.Background(), bob).Val(); got != 1 {
		t.Fatalf("leases while held: %d, want 1", got)
	}
	cancel()
	<-gone
	testwait.Eventually(t, 30*time.Second, func() (bool, string) {
		return c.ZCard(context.Background(), bob).Val() == 0, "the lease of a client that went away"
	})
	close(up2.release)
}
