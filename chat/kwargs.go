package chat

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// params are apply_chat_template's own parameters that reach the template
// or shape its output, as transformers takes them.
type params struct {
	tools, documents value
	gen, cont        bool
}

// takeParams reads the parameters from in and from vars, where a caller
// passing keyword arguments through (chat_template_kwargs) may have put
// them: there they are the parameter, not a variable, as in transformers,
// whose signature names them. Each is given in one place or the other.
func takeParams(in Input, vars map[string]value) (p params, err error) {
	if p.tools, err = seqParam("tools", in.Tools, vars, "tool schema"); err != nil {
		return p, err
	}
	if p.documents, err = seqParam("documents", in.Documents, vars, "document"); err != nil {
		return p, err
	}
	if p.gen, err = boolParam("add_generation_prompt", in.AddGenerationPrompt, vars); err != nil {
		return p, err
	}
	if p.cont, err = boolParam("continue_final_message", in.ContinueFinalMessage, vars); err != nil {
		return p, err
	}
	if p.cont && p.gen { // transformers' ValueError, in its words
		return p, errors.New("continue_final_message and add_generation_prompt are not compatible: use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead")
	}
	return p, nil
}

// seqParam is tools or documents: none, or an array of objects.
func seqParam(name string, raw []byte, vars map[string]value, what string) (value, error) {
	v, inVars := vars[name]
	delete(vars, name)
	if len(bytes.TrimSpace(raw)) > 0 {
		if inVars {
			return nil, fmt.Errorf("%s is given twice: as its own argument and among the template keyword arguments", name)
		}
		var err error
		if v, err = decodeJSON(raw); err != nil {
			return nil, fmt.Errorf("%s: %s", name, oneLine(err.Error()))
		}
	} else if !inVars {
		return none, nil
	}
	if _, isNone := v.(noneType); isNone {
		return none, nil
	}
	l, ok := v.(*list)
	if !ok {
		return nil, fmt.Errorf("%s: want a JSON array of %s objects, got %s", name, what, jsonTypeName(v))
	}
	for i, item := range l.items {
		if _, ok := item.(*dict); !ok {
			return nil, fmt.Errorf("%s[%d]: want a %s object, got %s", name, i, what, jsonTypeName(item))
		}
	}
	return v, nil
}

func boolParam(name string, field bool, vars map[string]value) (bool, error) {
	v, inVars := vars[name]
	delete(vars, name)
	if !inVars {
		return field, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s must be true or false, got %s", name, jsonTypeName(v))
	}
	if field && !b {
		return false, fmt.Errorf("%s is given twice, as true and as false", name)
	}
	return b || field, nil
}

// continueFinal cuts out after the final message's content, where
// transformers does: at the last occurrence of the content stripped of
// whitespace, keeping its leading whitespace's length and its trailing
// whitespace where the template kept it. A content given as parts
// continues the last part with a "text".
func continueFinal(out string, messages value) (string, error) {
	l, _ := messages.(*list)
	if l == nil || len(l.items) == 0 {
		return "", errors.New("continue_final_message is set but there are no messages")
	}
	m, _ := l.items[len(l.items)-1].(*dict)
	content, ok := m.getStr("content")
	if !ok {
		return "", errors.New("continue_final_message is set but the final message has no \"content\"")
	}
	if parts, isList := content.(*list); isList {
		content = nil
		for i := len(parts.items) - 1; i >= 0 && content == nil; i-- {
			if part, isDict := parts.items[i].(*dict); isDict {
				content, _ = part.getStr("text")
			}
		}
		if content == nil {
			return "", errors.New("continue_final_message is set but we could not find any text to continue in the final message")
		}
	}
	final, ok := content.(string)
	if !ok {
		return "", fmt.Errorf("continue_final_message is set but the final message's content is %s, not text", jsonTypeName(content))
	}
	stripped := pyStrip(final, nil, true, true)
	at := strings.LastIndex(out, stripped)
	if at < 0 {
		return "", errors.New("continue_final_message is set but the final message does not appear in the chat after applying the chat template: the template deletes portions of it")
	}
	keep := len(pyStrip(final, nil, true, false))
	if at+keep > len(out) || out[at:at+keep] != final {
		keep = len(stripped) // the template trimmed its trailing whitespace
	}
	return out[:at+keep], nil
}
