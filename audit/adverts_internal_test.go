package audit

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// A response's policies are read with what each gave and what it did not:
// a quota, remaining or name index of 0 is given, not absent; a parameter
// that is negative or beyond an int32 is absent; a name of none of the
// limits is no index. The samples' encoding keeps exactly that.
func TestAdvertsSayWhatWasGiven(t *testing.T) {
	names := map[string]int16{"first": 0, "second": 1}
	for _, tc := range []struct {
		name string
		f    Fields
		want []advert
	}{
		{"zeros are given", Fields{policy: `"first";q=0;w=0`, rateLimit: `"first";r=0;t=0`},
			[]advert{{name: 0, named: true, q: givenAs(0), w: givenAs(0), r: givenAs(0), t: givenAs(0)}}},
		{"no window, no reset", Fields{policy: `"second";q=5`, rateLimit: `"second";r=4`},
			[]advert{{name: 1, named: true, q: givenAs(5), r: givenAs(4)}}},
		{"a name of none", Fields{policy: `"other";q=5;w=1`},
			[]advert{{q: givenAs(5), w: givenAs(1)}}},
		{"no quota is no policy", Fields{policy: `"first";q=-1;w=1, "second";q=2147483648;w=1, "third";w=1`}, nil},
		{"remaining alone", Fields{rateLimit: `"first";r=3;t=2, "x";q=9`},
			[]advert{{name: 0, named: true, r: givenAs(3), t: givenAs(2)}}},
		{"legacy", Fields{xLimit: "10", xRemaining: "0"},
			[]advert{{legacy: true, q: givenAs(10), r: givenAs(0)}}},
		{"legacy beyond an int32", Fields{limit: "4294967296"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			advs := parseAdverts(nil, &tc.f, names)
			if !slices.Equal(advs, tc.want) {
				t.Fatalf("read %+v\nwant %+v", advs, tc.want)
			}
			s := Sample{Status: 200, Done: time.Millisecond, RetryAfter: -1, limit: -1, remaining: -1, Reset: -1, advN: uint8(len(advs))}
			_, back, _, err := encodeSamplesWith([]Sample{s}, advs, nil).decodeAll(0, 1)
			if err != nil || fmt.Sprint(back) != fmt.Sprint(advs) {
				t.Fatalf("encoded and decoded: %+v, %v; want %+v", back, err, advs)
			}
		})
	}
}
