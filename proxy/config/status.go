package config

import (
	"fmt"
	"strconv"
	"strings"
)

// StatusRange is an inclusive range of HTTP status codes.
type StatusRange struct{ Min, Max int }

// StatusRanges is a parsed HealthCheck.Active.HealthyStatuses value.
type StatusRanges []StatusRange

// ParseStatusRanges reads a comma-separated list of status codes and ranges,
// such as "200-399" or "200,204,300-302". Codes must lie in 100..599.
func ParseStatusRanges(s string) (StatusRanges, error) {
	var out StatusRanges
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		min, err1 := strconv.Atoi(strings.TrimSpace(lo))
		max, err2 := min, error(nil)
		if isRange {
			max, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || min < 100 || max > 599 || min > max {
			return nil, fmt.Errorf("%q is not a status code or range like 200-399 (codes 100..599)", part)
		}
		out = append(out, StatusRange{min, max})
	}
	return out, nil
}

// Contains reports whether code falls in any of the ranges.
func (rs StatusRanges) Contains(code int) bool {
	for _, r := range rs {
		if code >= r.Min && code <= r.Max {
			return true
		}
	}
	return false
}
