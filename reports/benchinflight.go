package reports

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// What the in-flight audit of a bench run found (--expect-in-flight), as
// the notes say it.

// inFlightAuditNotes say the in-flight audit's verdict, how far the load got
// (the most of one consumer surely held at once, with their flights), and
// its under-admission.
func inFlightAuditNotes(f audit.InFlightAudit) []string {
	hold := time.Duration(f.HoldMillis) * time.Millisecond
	head := fmt.Sprintf("In-flight audit (%d at once per consumer, each admitted request held %s or more): %s", f.Limit, hold, verdictWord(f.Verdict))
	if len(f.Reasons) > 0 {
		head += ": " + strings.Join(f.Reasons, "; ")
	}
	notes := []string{head + "."}
	most := fmt.Sprintf("Most surely held at once: %d of %d allowed", f.MostSurelyHeld, f.Limit)
	if f.WorstConsumer != "" && f.MostSurelyHeld > 0 && f.Verdict != audit.Leaked { // a leak's reason lists them
		most += fmt.Sprintf(", by %s (flights, sent→received since the run began: %s)", f.WorstConsumer, inFlightExample(f.Example))
	}
	if f.Verdict == audit.Leaked {
		most += " (" + f.WorstConsumer + ")"
	}
	notes = append(notes, fmt.Sprintf("%s; %d requests of %d consumers: %d admitted, %d denied.", most, f.Requests, f.Consumers, f.Admitted, f.Denied))
	switch {
	case f.UnderSkipped != "":
		notes = append(notes, "In-flight under-admission: not judged ("+f.UnderSkipped+").")
	case f.Denied == 0:
		notes = append(notes, "In-flight under-admission: no request was denied.")
	case f.UnderAdmitted == 0:
		notes = append(notes, fmt.Sprintf("In-flight under-admission: none of the %d denials judged came while fewer than %d could be held.", f.DenialsJudged, f.Limit))
	default:
		s := fmt.Sprintf("In-flight under-admission: %d of the %d denials judged (%.1f%%) came while fewer than %d of the consumer's requests could be held, the most to %s (%d)",
			f.UnderAdmitted, f.DenialsJudged, 100*f.UnderAdmittedShare, f.Limit, f.WorstUnderConsumer, f.WorstUnderAdmitted)
		if f.UnderExample != nil {
			s += fmt.Sprintf("; the first, %s, while at most %d could be held", f.UnderExample, f.UnderExampleHeld)
		}
		notes = append(notes, s+".")
	}
	return notes
}

// inFlightExample lists an example's flights, at most eight.
func inFlightExample(fs []audit.Flight) string {
	var parts []string
	for i, f := range fs {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(fs)-i))
			break
		}
		parts = append(parts, f.String())
	}
	return strings.Join(parts, ", ")
}
