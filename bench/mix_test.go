package bench

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// A mix sends each route its share by weight, to every consumer alike,
// and each consumer the value its place among the weights gives it; every
// request is one that net/http reads, rendered before the run without an
// allocation per request.
func TestMix(t *testing.T) {
	cfg := HTTPConfig{Target: "http://127.0.0.1:8080/ignored?x=1", Method: "GET", Requests: 1, Consumers: 10, ConsumerHeader: "X-Consumer-Id",
		Header: http.Header{"Authorization": {"Bearer a"}},
		Routes: []Route{ParseRoute("/search?q=redis:1"), ParseRoute("/items:3")},
		ConsumerValues: []ConsumerValues{{Header: "X-Plan", Values: []WeightedValue{{"gold", 1}, {"free", 4}}},
			{Header: "X-Region", Values: []WeightedValue{{"eu", 1}, {"us", 1}}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.defaults()
	m, _, err := newMix(cfg)
	if err != nil {
		t.Fatal(err)
	}
	routes := map[int]map[string]int{}
	buf := make([]byte, 0, 512)
	for j := range int64(400) {
		consumer := int(j % 10)
		r := m.route(j, consumer, 10)
		raw := m.request(r, consumer).render(&buf, consumer)
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		if routes[consumer] == nil {
			routes[consumer] = map[string]int{}
		}
		routes[consumer][req.URL.RequestURI()]++
		plan, region := "free", "us"
		if consumer%5 == 0 {
			plan = "gold"
		}
		if consumer%2 == 0 {
			region = "eu"
		}
		if req.Header.Get("X-Consumer-Id") != consumerName(int32(consumer)) || req.Header.Get("X-Plan") != plan ||
			req.Header.Get("X-Region") != region || req.Header.Get("Authorization") != "Bearer a" {
			t.Fatalf("consumer %d sent %q", consumer, raw)
		}
	}
	for c, got := range routes {
		if got["/search?q=redis"] != 10 || got["/items?x=1"] != 30 {
			t.Errorf("consumer %d sent %v: want 10 to /search?q=redis and 30 to /items?x=1 (the URL's query kept)", c, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { m.request(m.route(7, 7, 10), 7).render(&buf, 7) }); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}

// Bad routes and consumer values are refused, naming the field.
func TestMixRefused(t *testing.T) {
	base := HTTPConfig{Target: "http://h/", Requests: 1, Consumers: 2, ConsumerHeader: "X-Consumer-Id"}
	for name, change := range map[string]func(*HTTPConfig){
		"not a path":   func(c *HTTPConfig) { c.Routes = []Route{{Path: "search", Weight: 1}} },
		"a line break": func(c *HTTPConfig) { c.Routes = []Route{{Path: "/a\r\nX: 1", Weight: 1}} },
		"weight 0":     func(c *HTTPConfig) { c.Routes = []Route{{Path: "/a", Weight: 0}} },
		"no consumers": func(c *HTTPConfig) {
			c.Consumers, c.ConsumerHeader = 0, ""
			c.ConsumerValues = []ConsumerValues{{"X-Plan", []WeightedValue{{"a", 1}}}}
		},
		"consumer header":  func(c *HTTPConfig) { c.ConsumerValues = []ConsumerValues{{"x-consumer-id", []WeightedValue{{"a", 1}}}} },
		"empty value":      func(c *HTTPConfig) { c.ConsumerValues = []ConsumerValues{{"X-Plan", []WeightedValue{{"", 1}}}} },
		"too many to send": func(c *HTTPConfig) { c.ConsumerValues = make([]ConsumerValues, 11); manyValues(c.ConsumerValues) },
	} {
		c := base
		change(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: %+v validated", name, c)
		}
	}
	if _, err := ParseConsumerValues("X-Plan gold"); err == nil {
		t.Error("a value list without a colon parsed")
	}
	if cv, err := ParseConsumerValues("X-Plan: gold:1, free:9,trial"); err != nil || len(cv.Values) != 3 || cv.Values[1] != (WeightedValue{"free", 9}) ||
		cv.Values[2] != (WeightedValue{"trial", 1}) {
		t.Errorf("parsed %+v, %v", cv, err)
	}
}

func manyValues(cvs []ConsumerValues) {
	for i := range cvs {
		cvs[i] = ConsumerValues{Header: "X-H" + string(rune('a'+i)), Values: []WeightedValue{{"a", 1}, {"b", 1}}}
	}
}

// A conflicting or mixed expectation is refused before anything is sent.
func TestExpectRefused(t *testing.T) {
	base := HTTPConfig{Target: "http://h/", Requests: 1, Consumers: 2, ConsumerHeader: "X-Consumer-Id"}
	for name, ls := range map[string][]audit.ExpectedLimit{
		"one window twice": {{Limit: 5, Window: time.Second}, {Limit: 6, Window: time.Second}},
		"no algorithm":     {{Limit: 5, Window: time.Second, Algorithm: "naive"}},
		"bad window":       {{Limit: 5, Window: 0}},
	} {
		c := base
		c.ExpectLimits = ls
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

// A route replaces the URL's path and keeps its query, where {consumer}
// may stand, unless it has a query of its own; a placeholder in the
// URL's path, which every route would drop, is refused.
func TestRoutesKeepTheQuery(t *testing.T) {
	for _, c := range []struct{ target, path, want string }{
		{"http://h:1/?key={consumer}", "/search", "http://h:1/search?key={consumer}"},
		{"http://h:1/a?key={consumer}", "/search?q=1", "http://h:1/search?q=1"},
		{"http://h:1", "/items", "http://h:1/items"},
		{"http://h:1/x", "/items", "http://h:1/items"},
	} {
		if got := withPath(c.target, c.path); got != c.want {
			t.Errorf("withPath(%q, %q) = %q, want %q", c.target, c.path, got, c.want)
		}
	}
	cfg := HTTPConfig{Target: "http://127.0.0.1:8080/users/{consumer}", Method: "GET", Requests: 1, Consumers: 2,
		Routes: []Route{ParseRoute("/search:1")}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "{consumer} in the URL's query") {
		t.Errorf("a placeholder in the URL's path with --path: %v, want it refused", err)
	}
	cfg.Target = "http://127.0.0.1:8080/?key={consumer}"
	if err := cfg.Validate(); err != nil {
		t.Errorf("{consumer} in the URL's query with --path: %v", err)
	}
}
