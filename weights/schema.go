package weights

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/tensor"
)

// A weight struct declares the checkpoint tensors it holds in struct tags,
// so that a tensor's name is written once, beside the field it fills:
//
//	Proj  *tensor.Matrix `tensor:"proj.weight" shape:"2*n_h*d_h,H"`
//	Decay []float32      `tensor:"decay" shape:"n_v" init:"log_decay"`
//
// tensor is the name under the enclosing prefix; shape lists the stored
// dims as symbols, integers, products (2*n_h*d_h) and sums (C+n_v*d_v),
// resolved by Sizes; init names the random-fill class (empty: the default
// for the field's rank). A field tagged `tensor:"PREFIX."` whose type is a
// struct, a pointer to one or an interface holding one is walked under
// that prefix; a slice of structs tagged `tensor:"PREFIX%d."` is walked
// once per element. Untagged struct fields are walked under the same
// prefix. when:"FLAG" (or "!FLAG") keeps a field only where Sizes holds
// FLAG non-zero (zero). Nil pointers are skipped: the owner decides which
// parts exist before the walk.

// Sizes resolves the symbols of shape and when tags.
type Sizes map[string]int

// Field is one tensor a weight struct declares.
type Field struct {
	Name  string // the canonical name: prefixes and tag joined
	Shape []int  // as stored
	Init  string // the random-fill class, "" for the rank's default
	tag   reflect.StructTag
	value reflect.Value
}

// Tag returns the field's struct tag value for key (for owner-defined keys).
func (f Field) Tag(key string) string { return f.tag.Get(key) }

// IsMatrix reports whether the field holds a matrix (a rank-3 tensor is
// held as its [A·B, C] matrix); otherwise it holds a flat vector.
func (f Field) IsMatrix() bool { return f.value.Type() == matrixType }

// Matrix returns the bound matrix (nil before binding).
func (f Field) Matrix() *tensor.Matrix {
	if !f.IsMatrix() {
		return nil
	}
	return f.value.Interface().(*tensor.Matrix)
}

// Vector returns the bound vector (nil before binding).
func (f Field) Vector() []float32 {
	if f.IsMatrix() {
		return nil
	}
	return f.value.Interface().([]float32)
}

// Is reports whether the field is the one ptr points to.
func (f Field) Is(ptr any) bool { return f.value.Addr().Interface() == ptr }

// SetMatrix binds a matrix field.
func (f Field) SetMatrix(m *tensor.Matrix) { f.value.Set(reflect.ValueOf(m)) }

// SetVector binds a vector field.
func (f Field) SetVector(v []float32) { f.value.Set(reflect.ValueOf(v)) }

var (
	matrixType = reflect.TypeFor[*tensor.Matrix]()
	vectorType = reflect.TypeFor[[]float32]()
)

// Walk visits every tensor field reachable from root (a pointer to a
// struct) in field order, with names under prefix. It stops at the first
// error visit returns; a malformed tag is an error too.
func Walk(root any, prefix string, sizes Sizes, visit func(Field) error) error {
	v := reflect.ValueOf(root)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("weights.Walk: want a non-nil pointer to a struct, got %T", root)
	}
	return walkStruct(v.Elem(), prefix, sizes, visit)
}

func walkStruct(v reflect.Value, prefix string, sizes Sizes, visit func(Field) error) error {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		if w, ok := sf.Tag.Lookup("when"); ok && !holds(sizes, w) {
			continue
		}
		name, tagged := sf.Tag.Lookup("tensor")
		fv := v.Field(i)
		switch {
		case tagged && (fv.Type() == matrixType || fv.Type() == vectorType):
			shape, err := sizes.Shape(sf.Tag.Get("shape"))
			if err != nil {
				return fmt.Errorf("%s.%s: %w", t.Name(), sf.Name, err)
			}
			if err := visit(Field{Name: prefix + name, Shape: shape, Init: sf.Tag.Get("init"), tag: sf.Tag, value: fv}); err != nil {
				return err
			}
		case tagged && fv.Kind() == reflect.Slice && strings.Contains(name, "%d"):
			for j := range fv.Len() {
				if err := walkValue(fv.Index(j), prefix+fmt.Sprintf(name, j), sizes, visit); err != nil {
					return err
				}
			}
		case tagged:
			if err := walkValue(fv, prefix+name, sizes, visit); err != nil {
				return err
			}
		case fv.Kind() == reflect.Struct:
			if err := walkStruct(fv, prefix, sizes, visit); err != nil {
				return err
			}
		}
	}
	return nil
}

// walkValue walks a struct, or the struct a pointer or interface holds.
func walkValue(v reflect.Value, prefix string, sizes Sizes, visit func(Field) error) error {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return fmt.Errorf("weights.Walk: %s: a tensor prefix on a %s, not a struct", prefix, v.Kind())
	}
	return walkStruct(v, prefix, sizes, visit)
}

// holds evaluates a when tag: "FLAG" or "!FLAG".
func holds(s Sizes, when string) bool {
	if flag, neg := strings.CutPrefix(when, "!"); neg {
		return s[flag] == 0
	}
	return s[when] != 0
}

// Shape resolves a shape tag such as "C,1,K" or "2*n_h*d_h,H".
func (s Sizes) Shape(tag string) ([]int, error) {
	if tag == "" {
		return nil, fmt.Errorf("no shape tag")
	}
	dims := strings.Split(tag, ",")
	out := make([]int, len(dims))
	for i, d := range dims {
		v, err := s.eval(d)
		if err != nil {
			return nil, fmt.Errorf("shape %q: %w", tag, err)
		}
		out[i] = v
	}
	return out, nil
}

// eval computes a sum of products of symbols and integers.
func (s Sizes) eval(expr string) (int, error) {
	sum := 0
	for _, term := range strings.Split(expr, "+") {
		p := 1
		for _, f := range strings.Split(term, "*") {
			f = strings.TrimSpace(f)
			if n, err := strconv.Atoi(f); err == nil {
				p *= n
				continue
			}
			n, ok := s[f]
			if !ok {
				return 0, fmt.Errorf("unknown size %q", f)
			}
			p *= n
		}
		sum += p
	}
	return sum, nil
}
