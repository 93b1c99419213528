// Package goldens reads the golden cases of testdata/golden (their
// manifest and each case's inputs.json, testdata/README.md) for the tests
// of every package that runs them, so that the file format is read in one
// place.
package goldens

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
)

// Case is one golden case of a manifest.
type Case struct {
	Name   string   `json:"name"`
	Batch  int      `json:"batch"`
	Seq    int      `json:"seq"`
	Stages []string `json:"stages"`
}

// Inputs are a case's token ids and, for the generation cases, what
// transformers generated from them.
type Inputs struct {
	IDs      [][]int `json:"ids"`
	Generate *struct {
		MaxNewTokens int     `json:"max_new_tokens"`
		NewIDs       [][]int `json:"new_ids"`
	} `json:"generate"`
}

// ReadManifest returns the cases listed in root/manifest.json; a manifest
// that lists none is an error.
func ReadManifest(root string) ([]Case, error) {
	data, err := os.ReadFile(filepath.Join(root, "manifest.json"))
	if err != nil {
		return nil, err
	}
	var man struct {
		Cases []Case `json:"cases"`
	}
	if err := json.Unmarshal(data, &man); err != nil {
		return nil, err
	}
	if len(man.Cases) == 0 {
		return nil, errors.New(filepath.Join(root, "manifest.json") + " lists no case")
	}
	return man.Cases, nil
}

// ReadInputs returns the inputs.json of the case in dir.
func ReadInputs(dir string) (Inputs, error) {
	var in Inputs
	data, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
	if err == nil {
		err = json.Unmarshal(data, &in)
	}
	return in, err
}
