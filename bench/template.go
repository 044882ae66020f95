package bench

import (
	"fmt"
	"strings"
)

// placeholder is what a placeholder of a template stands for.
type placeholder uint8

const (
	// noPlaceholder is no placeholder: a part of literal text.
	noPlaceholder placeholder = iota
	// consumerPlaceholder is {consumer}: the consumer's identity.
	consumerPlaceholder
	// jwtPlaceholder is {jwt}: the token minted for the consumer.
	jwtPlaceholder
)

// placeholderNames are the placeholders as a template writes them.
var placeholderNames = map[string]placeholder{"consumer": consumerPlaceholder, "jwt": jwtPlaceholder}

// template is text in which {consumer} and {jwt} stand for each consumer's
// identity and token. {{ is a literal {; any other brace is text, unless
// it reads as a placeholder ({ a letter, then letters, digits, - or _, and
// }), which must be one of the known ones.
type template struct{ parts []part }

// part is literal text, or a placeholder.
type part struct {
	text        string
	placeholder placeholder
}

// parseTemplate reads s as a template.
func parseTemplate(s string) (template, error) {
	var t template
	var text strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '{' {
			j := strings.IndexByte(s[i:], '{')
			if j < 0 {
				j = len(s) - i
			}
			text.WriteString(s[i : i+j])
			i += j
			continue
		}
		if strings.HasPrefix(s[i:], "{{") {
			text.WriteByte('{')
			i += 2
			continue
		}
		name, ok := placeholderAt(s[i:])
		if !ok {
			text.WriteByte('{')
			i++
			continue
		}
		ph, known := placeholderNames[name]
		if !known {
			return template{}, fmt.Errorf("unknown placeholder {%s}: want {consumer} or {jwt} (write {{ for a literal {)", name)
		}
		if text.Len() > 0 {
			t.parts = append(t.parts, part{text: text.String()})
			text.Reset()
		}
		t.parts = append(t.parts, part{placeholder: ph})
		i += len(name) + 2
	}
	if text.Len() > 0 {
		t.parts = append(t.parts, part{text: text.String()})
	}
	return t, nil
}

// placeholderAt reads the name of the placeholder s begins with: {, a
// letter, then letters, digits, - or _, and }.
func placeholderAt(s string) (string, bool) {
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '}':
			return s[1:i], i > 1
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 1 && (c >= '0' && c <= '9' || c == '-' || c == '_'):
		default:
			return "", false
		}
	}
	return "", false
}

// uses says whether the template holds ph.
func (t template) uses(ph placeholder) bool {
	for _, p := range t.parts {
		if p.placeholder == ph {
			return true
		}
	}
	return false
}

// render writes the template with each placeholder's value given by value.
func (t template) render(value func(placeholder) string) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.placeholder == noPlaceholder {
			b.WriteString(p.text)
		} else {
			b.WriteString(value(p.placeholder))
		}
	}
	return b.String()
}
