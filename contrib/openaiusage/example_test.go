package openaiusage_test

import (
	"fmt"

	"github.com/slidelimit/slidelimit/contrib/openaiusage"
)

// A chat completion streamed with stream_options {"include_usage": true}:
// its last chunk before [DONE] carries the usage.
func ExampleTokens() {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n" +
		"data: [DONE]\n\n"
	costs := openaiusage.Tokens(nil, []byte(stream))
	fmt.Println(costs["tokens"], costs["input_tokens"], costs["output_tokens"])
	// Output: 12 9 3
}
