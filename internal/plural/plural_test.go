package plural

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 consumers"}, {1, "1 consumer"}, {2, "2 consumers"}, {-1, "-1 consumers"}} {
		if got := Count(tc.n, "consumer"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := Count(1, "Poisson client"); got != "1 Poisson client" {
		t.Errorf("got %q", got)
	}
}
