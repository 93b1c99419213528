package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// parseIDsJSON reads token ids as a JSON array of equal-length arrays of
// non-negative integers, e.g. [[1,2,3],[4,5,6]]. A flat array [1,2,3] is
// accepted as one row.
func parseIDsJSON(data []byte) ([][]int, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("empty input: want a JSON array of token-id arrays, e.g. [[1,2,3]]")
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("want a JSON array of token-id arrays, e.g. [[1,2,3]]: %v", err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("empty input: the array holds no sequences")
	}
	// A flat array of numbers is one sequence.
	if t := bytes.TrimSpace(raw[0]); len(t) > 0 && t[0] != '[' {
		row, err := parseRow(data)
		if err != nil {
			return nil, err
		}
		return [][]int{row}, nil
	}
	out := make([][]int, len(raw))
	for i, r := range raw {
		row, err := parseRow(r)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		if len(row) == 0 {
			return nil, fmt.Errorf("row %d is empty: every sequence needs at least one token", i)
		}
		if len(row) != len(out[0]) && i > 0 {
			return nil, fmt.Errorf("row %d has %d ids but row 0 has %d: rows must have equal length (no padding support)", i, len(row), len(out[0]))
		}
		out[i] = row
	}
	return out, nil
}

func parseRow(data []byte) ([]int, error) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil {
		return nil, fmt.Errorf("want an array of integers: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the array")
	}
	row := make([]int, len(nums))
	for j, n := range nums {
		v, err := n.Int64()
		if err != nil || v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("id %d is %s: want a non-negative integer", j, n.String())
		}
		row[j] = int(v)
	}
	return row, nil
}
