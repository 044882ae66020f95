package field

import "testing"

func TestRender(t *testing.T) {
	flags := map[string]string{"Limit": "--limit", "Window": "--window"}
	name := func(f string) string { return flags[f] }
	for _, tc := range []struct {
		err  *Error
		want string
	}{
		{Errorf("Limit", "must be at least 1 (got %d)", 0), "--limit must be at least 1 (got 0)"},
		{Errorf("Limit", "needs {Window}"), "--limit needs --window"},
		{Errorf("Window", ": %s", "not a duration"), "--window: not a duration"},
		{Errorf("Limit", ": unknown placeholder {bogus} (known: {limit})"), "--limit: unknown placeholder {bogus} (known: {limit})"},
	} {
		if got := tc.err.Render(name); got != tc.want {
			t.Errorf("Render = %q, want %q", got, tc.want)
		}
	}
	if got := Errorf("Limit", "needs {Window}").Error(); got != "Limit needs Window" {
		t.Errorf("Error() = %q", got)
	}
}
