package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/rules"
)

// The flags of bench http that say what the audit expects, and who the
// consumers are: read into bench.HTTPConfig before anything is sent.

// sourceIPs reads --source-ips into cfg: one address per consumer, whose
// number it sets, or must match when --consumers is given.
func sourceIPs(cfg *bench.HTTPConfig, opts benchOptions) error {
	if opts.sourceIPs == "" {
		return nil
	}
	addrs, err := bench.ParseSourceIPs(opts.sourceIPs)
	if err != nil {
		return flagError(err, benchNames)
	}
	if cfg.Identities != nil && len(cfg.Identities) != len(addrs) {
		return usagef("--source-ips gives %d addresses for the %d identities of --consumers-from: one address per consumer",
			len(addrs), len(cfg.Identities))
	}
	if opts.consumersSet && opts.Consumers != len(addrs) {
		n := fmt.Sprintf("%d addresses", len(addrs))
		if len(addrs) == 1 {
			n = "1 address"
		}
		return usagef("--source-ips gives %s for --consumers %d: one address per consumer (or leave --consumers out)", n, opts.Consumers)
	}
	cfg.Consumers, cfg.SourceIPs = len(addrs), addrs
	if !opts.connectionsSet {
		// A connection reopens whenever it sends for another consumer than
		// its last: a multiple of the addresses (at least the default),
		// keeps each on one, up to maxSourceConnections.
		k := len(addrs)
		cfg.Connections = min(k*((opts.Connections+k-1)/k), max(maxSourceConnections, opts.Connections))
	}
	return nil
}

// expectConfig reads the flags of what the audit expects, and of the mix
// of requests sent, into cfg.
func expectConfig(cfg *bench.HTTPConfig, opts benchOptions) error {
	for _, v := range opts.expectLimits {
		ls, err := audit.ParseExpectedLimits(v, opts.ExpectAlgorithm)
		if err != nil {
			return flagError(err, benchNames)
		}
		cfg.ExpectLimits = append(cfg.ExpectLimits, ls...)
	}
	if len(cfg.ExpectLimits) > 0 {
		cfg.ExpectAlgorithm = "" // given to each limit that names none
	}
	if opts.expectRules != "" {
		if len(opts.expectLimits) > 0 {
			return usagef("--expect-rules and --expect-limit are two audits: give one")
		}
		if opts.ExpectAlgorithm != "" {
			return usagef("--expect-algorithm is for --expect-limit: each limit of --expect-rules names its own")
		}
		src, err := os.ReadFile(opts.expectRules)
		if err != nil {
			return usagef("--expect-rules: %w", err)
		}
		if cfg.ExpectRules, err = rules.Parse(opts.expectRules, src, rules.ForGateway()); err != nil {
			return usagef("--expect-rules: %w", err)
		}
		for _, l := range cfg.ExpectRules.Limits() {
			if l.InFlight {
				// Judged as a rate, a limit of requests at once would be
				// accused of what it never promised.
				return usagef("--expect-rules: limit %q is an in-flight limit (in_flight), which this audit does not judge as a rate: "+
					"leave it out of the file", l.ID)
			}
		}
	}
	if len(opts.expectLimits) == 0 && opts.expectRules == "" && opts.ExpectInFlight == 0 {
		switch {
		case opts.FailOnLeak:
			return usagef("--fail-on-leak needs --expect-limit, --expect-rules or --expect-in-flight")
		case opts.FailOnUnder != nil:
			return usagef("--fail-on-under needs --expect-limit, --expect-rules or --expect-in-flight")
		}
	}
	if err := inFlightLoad(cfg, opts); err != nil {
		return err
	}
	for _, p := range opts.paths {
		cfg.Routes = append(cfg.Routes, bench.ParseRoute(p))
	}
	for _, v := range opts.values {
		cv, err := bench.ParseConsumerValues(v)
		if err != nil {
			return flagError(err, benchNames)
		}
		cfg.ConsumerValues = append(cfg.ConsumerValues, cv)
	}
	return nil
}

// maxSourceConnections bounds the connections --source-ips opens by
// default, one per address.
const maxSourceConnections = 1000

// identityFlags reads what names the consumers: --consumers-from,
// --jwt-secret and --jwt-claim, and the default --consumer-header, which
// is left out when the request names its consumer elsewhere.
func identityFlags(cfg *bench.HTTPConfig, opts benchOptions) error {
	ids, err := opts.loadFlags.identities(cfg.Consumers)
	if err != nil {
		return err
	}
	if ids != nil {
		cfg.Identities, cfg.Consumers = ids, len(ids)
	}
	if file, ok := strings.CutPrefix(opts.jwtSecret, "@"); ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return usagef("--jwt-secret: %w", err)
		}
		cfg.JWTSecret = []byte(strings.TrimRight(string(b), "\r\n"))
	} else if opts.jwtSecret != "" {
		cfg.JWTSecret = []byte(opts.jwtSecret)
	}
	for _, c := range opts.jwtClaims {
		claim, err := bench.ParseJWTClaim(c)
		if err != nil {
			return usagef("--jwt-claim %w", err)
		}
		cfg.JWTClaims = append(cfg.JWTClaims, claim)
	}
	named := cfg.NamesConsumer()
	if !opts.consumerHeaderSet && named {
		cfg.ConsumerHeader = ""
	}
	switch {
	case cfg.ConsumerHeader == "" && !named && cfg.Identities == nil:
		cfg.Consumers = 0 // one anonymous client
	case cfg.Consumers < 1:
		return usagef("--consumers must be at least 1 (got %d)", cfg.Consumers)
	}
	return nil
}

// inFlightLoad reads --in-flight-per-consumer into cfg's connections: K
// per consumer, so that each connection sends one consumer's requests
// and each consumer keeps K outstanding. With --expect-in-flight N and
// neither it nor --connections given, K is 2N: the load tries more than
// the limit.
func inFlightLoad(cfg *bench.HTTPConfig, opts benchOptions) error {
	k := opts.inFlightPerConsumer
	switch {
	case k < 0:
		return usagef("--in-flight-per-consumer must be at least 1 (got %d)", k)
	case k > 0 && opts.connectionsSet:
		return usagef("--in-flight-per-consumer sets the connections, K per consumer: give it or --connections")
	case k > 0 && opts.sourceIPs != "":
		return usagef("--in-flight-per-consumer is not for --source-ips, which sets the connections per address")
	case k == 0 && (opts.ExpectInFlight <= 0 || opts.connectionsSet || opts.sourceIPs != ""):
		return nil
	case k == 0:
		k = int(min(2*opts.ExpectInFlight, bench.MaxConnections))
	}
	n := max(cfg.Consumers, 1)
	if k > bench.MaxConnections/n {
		return usagef("--in-flight-per-consumer %d × %d consumers is over %d connections", k, n, bench.MaxConnections)
	}
	cfg.Connections = k * n
	return nil
}
