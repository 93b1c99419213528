package generate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// CheckContinuable refuses a conversation whose final message a reply
// cannot continue (continue_final_message): there must be one, an
// assistant's, with its content a string. transformers renders any final
// message so; a reply continues only the assistant's own.
func CheckContinuable(msgs []json.RawMessage) error {
	if len(msgs) == 0 {
		return errors.New("there is no final message to continue")
	}
	var last struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(msgs[len(msgs)-1], &last); err != nil {
		return fmt.Errorf("the final message: %w", err)
	}
	if last.Role != "assistant" {
		return fmt.Errorf("the final message is the %s's (role %q): a reply continues an assistant message, so the conversation must end with one", roleName(last.Role), last.Role)
	}
	var s string
	if json.Unmarshal(last.Content, &s) != nil {
		return errors.New("the final assistant message's content is not a string: give its text as the content")
	}
	return nil
}

func roleName(role string) string {
	if role == "" {
		return "message without a role"
	}
	return role
}

// Continue generates the continuation of the conversation's final
// message, an assistant's (CheckContinuable), rendered as transformers'
// apply_chat_template(continue_final_message=True) renders it: no
// end-of-turn after it and no generation prompt. The Reply's Text is the
// continuation, which the message's content then ends with.
func (c *Conversation) Continue(stream func(text string)) (*Reply, error) {
	if err := CheckContinuable(c.msgs); err != nil {
		return nil, fmt.Errorf("continue_final_message: %w", err)
	}
	msgs := slices.Clip(c.msgs)
	rep, err := c.turn(msgs, true, stream)
	if err != nil {
		return nil, err
	}
	var last map[string]json.RawMessage
	var content string
	if err := json.Unmarshal(msgs[len(msgs)-1], &last); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(last["content"], &content); err != nil {
		return nil, err
	}
	last["content"], _ = json.Marshal(content + rep.Text)
	ext, err := json.Marshal(last)
	if err != nil {
		return nil, err
	}
	c.msgs, c.turns = append(msgs[:len(msgs)-1], ext), c.turns+1
	return rep, nil
}
