//! Images a tool returned, on the wires (ADR-087). Only a request for a model that reads
//! images (`ChatRequest::vision`) carries them. Chat Completions and the Responses API
//! cannot put an image in a tool result, so they send the images of a run of tool results
//! as one user turn right after it, each call's images after a caption naming the call (the
//! way goose and the OpenAI Agents SDK do); Ollama and Anthropic put them in the result.

use fabric_domain::{Message, Role, ToolImage};
use serde::{Serialize, Serializer};

/// An image as a `data:` URL, written straight into the request body: the image's base64
/// is not copied into a new string per request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DataUrl<'a>(pub(crate) &'a ToolImage);

impl Serialize for DataUrl<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!(
            "data:{};base64,{}",
            self.0.mime_type, self.0.data
        ))
    }
}

/// The images a tool message hands to a model: none unless it reads them.
pub(crate) fn of(message: &Message, vision: bool) -> &[ToolImage] {
    match vision && message.role == Role::Tool {
        true => &message.images,
        false => &[],
    }
}

/// When `messages[at]` ends a run of tool messages: each call of the run that returned
/// images, with them, in order, for the user turn that follows the run. Empty otherwise,
/// and always when the model does not read images.
pub(crate) fn after_results(
    messages: &[Message],
    at: usize,
    vision: bool,
) -> Vec<(&str, &[ToolImage])> {
    let is_tool = |i: usize| messages.get(i).is_some_and(|m| m.role == Role::Tool);
    if !vision || !is_tool(at) || is_tool(at + 1) {
        return Vec::new();
    }
    let start = (0..=at)
        .rev()
        .take_while(|i| is_tool(*i))
        .last()
        .unwrap_or(at);
    messages[start..=at]
        .iter()
        .filter(|m| !m.images.is_empty())
        .map(|m| (m.tool_call_id.as_deref().unwrap_or(""), m.images.as_slice()))
        .collect()
}

/// The text before a call's images in the user turn that carries them.
pub(crate) fn caption(call_id: &str, count: usize) -> String {
    let images = if count == 1 { "image" } else { "images" };
    format!("The {images} the tool call `{call_id}` returned:")
}

/// What the wires' image tests share: a request, and a conversation whose one tool call
/// (`c1`) returned an image.
#[cfg(test)]
pub(crate) mod fixture {
    use fabric_domain::{Message, ToolCall, ToolImage};
    use fabric_engine::{ChatRequest, ToolDefinitions};
    use std::sync::LazyLock;

    /// The result's text, as the MCP tool writes it.
    pub(crate) const PLACEHOLDER: &str = "[image content, image/png, 4 base64 characters]";

    static NO_TOOLS: LazyLock<ToolDefinitions> = LazyLock::new(ToolDefinitions::none);

    /// A plain request for `messages`, for a model that reads images or not.
    pub(crate) fn request(messages: &[Message], vision: bool) -> ChatRequest<'_> {
        ChatRequest {
            model: "m",
            messages,
            tools: &NO_TOOLS,
            temperature: None,
            top_p: None,
            max_tokens: None,
            stream: false,
            vision,
        }
    }

    /// `look`, a call of `snap` (`c1`), and its result with an image.
    pub(crate) fn conversation() -> Vec<Message> {
        let call = ToolCall {
            id: "c1".into(),
            name: "snap".into(),
            arguments: "{}".into(),
        };
        vec![
            Message::user("look"),
            Message::assistant(None, vec![call]),
            Message::tool_result("c1", PLACEHOLDER)
                .with_images(vec![ToolImage::new("image/png", "AAAA")]),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_image(id: &str) -> Message {
        Message::tool_result(id, "r").with_images(vec![ToolImage::new("image/png", "AAAA")])
    }

    #[test]
    fn issue_29_a_run_of_results_hands_its_images_over_once_at_its_end() {
        let messages = vec![
            Message::user("u"),
            with_image("a"),
            Message::tool_result("b", "r"),
            with_image("c"),
            Message::user("next"),
        ];
        assert!(
            after_results(&messages, 1, true).is_empty(),
            "not the run's end"
        );
        let handed: Vec<&str> = after_results(&messages, 3, true)
            .iter()
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(handed, ["a", "c"]);
        assert!(after_results(&messages, 3, false).is_empty());
        assert!(of(&messages[1], false).is_empty());
        let url = serde_json::to_string(&DataUrl(&messages[1].images[0])).unwrap();
        assert_eq!(url, r#""data:image/png;base64,AAAA""#);
    }
}
