//! The plain client against servers that answer byte for byte as a test scripts them.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use super::*;

const PATIENCE: Duration = Duration::from_secs(5);

fn client() -> Plain {
    Plain::new(PATIENCE, PATIENCE)
}

fn no_body() -> Result<Option<Bytes>, PlainError> {
    Ok(None)
}

fn json_body() -> Result<Option<Bytes>, PlainError> {
    Ok(Some(Bytes::from_static(b"{\"hello\":1}")))
}

/// Reads one request (head and `Content-Length` body) off `socket`; `None` at its end.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<String> {
    let mut raw = Vec::new();
    let mut piece = [0u8; 1024];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_string();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |n| n.trim().parse::<usize>().unwrap());
            while raw.len() < end + 4 + length {
                let n = socket.read(&mut piece).await.ok()?;
                if n == 0 {
                    return None;
                }
                raw.extend_from_slice(&piece[..n]);
            }
            return Some(String::from_utf8_lossy(&raw).to_string());
        }
        let n = socket.read(&mut piece).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&piece[..n]);
    }
}

/// A server that answers each request on a connection with the next of `answers`, written in
/// pieces of `piece` bytes, and counts its connections. An empty answer closes the connection
/// after reading the request, without answering; an answer that says `connection: close`
/// closes it after answering.
async fn serve(answers: Vec<&'static [u8]>, piece: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/chat", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            let answers = Arc::clone(&answers);
            tokio::spawn(async move {
                while read_request(&mut socket).await.is_some() {
                    let Some(answer) = answers.lock().unwrap().next() else {
                        return;
                    };
                    if answer.is_empty() {
                        return;
                    }
                    for part in answer.chunks(piece) {
                        socket.write_all(part).await.unwrap();
                        socket.flush().await.unwrap();
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    if answer
                        .to_ascii_lowercase()
                        .windows(17)
                        .any(|w| w == b"connection: close")
                    {
                        return;
                    }
                }
            });
        }
    });
    (url, connections)
}

async fn get_all(client: &Plain, url: &str) -> Result<(u16, Vec<u8>), PlainError> {
    let request = Request {
        headers: &[],
        body: &json_body,
    };
    let mut answer = client.send("POST", url, request).await?;
    let body = answer.body.read_all().await?;
    Ok((answer.status, body))
}

#[tokio::test]
async fn a_content_length_answer_is_read_and_its_connection_kept_for_the_next_request() {
    let answer: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
    let (url, connections) = serve(vec![answer, answer], 2).await;
    let client = client();
    assert_eq!(
        get_all(&client, &url).await.unwrap(),
        (200, b"hello".to_vec())
    );
    assert_eq!(
        get_all(&client, &url).await.unwrap(),
        (200, b"hello".to_vec())
    );
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "the connection was kept"
    );
}

#[tokio::test]
async fn a_chunked_answer_with_extensions_and_trailers_arrives_whole_byte_by_byte() {
    let answer: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;name=value\r\nhello\r\n7\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n";
    let (url, connections) = serve(vec![answer, answer], 1).await;
    let client = client();
    assert_eq!(get_all(&client, &url).await.unwrap().1, b"hello, world");
    assert_eq!(get_all(&client, &url).await.unwrap().1, b"hello, world");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_streamed_answer_comes_piece_by_piece() {
    let answer: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
        6\r\ndata:1\r\n6\r\ndata:2\r\n0\r\n\r\n";
    let (url, _) = serve(vec![answer], 1000).await;
    let client = client();
    let request = Request {
        headers: &[],
        body: &json_body,
    };
    let mut answer = client.send("POST", &url, request).await.unwrap();
    let mut pieces = Vec::new();
    while let Some(piece) = answer.body.next().await.unwrap() {
        pieces.push(String::from_utf8(piece).unwrap());
    }
    assert_eq!(pieces, ["data:1", "data:2"]);
}

#[tokio::test]
async fn an_answer_without_a_length_runs_to_the_connections_end_and_is_not_kept() {
    let answer: &[u8] = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it";
    let (url, connections) = serve(vec![answer, answer], 3).await;
    let client = client();
    assert_eq!(get_all(&client, &url).await.unwrap().1, b"all of it");
    assert_eq!(get_all(&client, &url).await.unwrap().1, b"all of it");
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_kept_connection_the_server_closed_is_replaced_and_the_request_sent_again() {
    let answer: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    // The second request on the first connection is read and the connection closed.
    let (url, connections) = serve(vec![answer, b"", answer], 100).await;
    let client = client();
    assert_eq!(get_all(&client, &url).await.unwrap().1, b"ok");
    assert_eq!(get_all(&client, &url).await.unwrap().1, b"ok");
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn interim_answers_are_skipped() {
    let answer: &[u8] =
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 1\r\n\r\nx";
    let (url, _) = serve(vec![answer], 7).await;
    assert_eq!(
        get_all(&client(), &url).await.unwrap(),
        (201, b"x".to_vec())
    );
}

#[tokio::test]
async fn a_status_and_retry_after_are_read() {
    let answer: &[u8] =
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\ncontent-length: 4\r\n\r\nslow";
    let (url, _) = serve(vec![answer], 100).await;
    let request = Request {
        headers: &[],
        body: &no_body,
    };
    let mut answer = client().send("GET", &url, request).await.unwrap();
    assert_eq!(answer.status, 429);
    assert_eq!(answer.retry_after.as_deref(), Some("2"));
    assert_eq!(answer.body.read_all().await.unwrap(), b"slow");
}

#[tokio::test]
async fn a_server_that_is_not_http_is_named_as_such() {
    let (url, _) = serve(vec![b"SSH-2.0-OpenSSH_9.6\r\n\r\n"], 100).await;
    let error = get_all(&client(), &url).await.unwrap_err();
    let PlainError::Malformed(detail) = error else {
        panic!("{error:?}")
    };
    assert!(
        detail.contains("not HTTP/1.1") && detail.contains("SSH-2.0"),
        "{detail}"
    );
}

#[tokio::test]
async fn a_body_cut_short_is_a_broken_connection() {
    let (url, _) = serve(
        vec![b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 10\r\n\r\nabc"],
        100,
    )
    .await;
    // The server's task ends with the answer's three bytes and drops the socket.
    let error = get_all(&client(), &url).await.unwrap_err();
    assert!(
        matches!(&error, PlainError::Broken(d) if d.contains("Content-Length")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(socket);
    });
    let client = Plain::new(PATIENCE, Duration::from_millis(200));
    let started = Instant::now();
    let error = get_all(&client, &url).await.unwrap_err();
    assert_eq!(error, PlainError::Timeout);
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn no_server_is_a_connect_error_that_says_so() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    drop(listener);
    let error = get_all(&client(), &url).await.unwrap_err();
    assert!(
        matches!(&error, PlainError::Connect(d) if d.contains("refused")),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_request_carries_its_headers_length_and_body() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let request = read_request(&mut socket).await.unwrap();
        socket
            .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .unwrap();
        request
    });
    let headers = [("authorization", "Bearer k".to_owned(), true)];
    let request = Request {
        headers: &headers,
        body: &json_body,
    };
    let url = format!("http://{address}/v1/chat?x=1#fragment");
    let mut answer = client().send("POST", &url, request).await.unwrap();
    assert_eq!(answer.status, 204);
    assert_eq!(answer.body.read_all().await.unwrap(), b"");
    let request = seen.await.unwrap();
    assert!(
        request.starts_with("POST /v1/chat?x=1 HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(
        request.contains(&format!("host: {address}\r\n")),
        "{request}"
    );
    assert!(request.contains("authorization: Bearer k\r\n"), "{request}");
    assert!(request.contains("content-length: 11\r\n"), "{request}");
    assert!(request.ends_with("\r\n\r\n{\"hello\":1}"), "{request}");
}

#[tokio::test]
async fn a_header_value_with_a_line_break_is_refused_before_anything_is_sent() {
    let (url, connections) = serve(vec![], 1).await;
    let headers = [("authorization", "Bearer k\r\nx-evil: 1".to_owned(), true)];
    let request = Request {
        headers: &headers,
        body: &no_body,
    };
    let error = client().send("GET", &url, request).await.unwrap_err();
    assert!(
        matches!(&error, PlainError::Request(d) if d.contains("`authorization`")),
        "{error:?}"
    );
    // Refused before connecting: the server saw no connection at all.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(connections.load(Ordering::SeqCst), 0);
}

/// A name's first address that drops the connection attempt (here a listener whose queue is
/// full: the kernel drops further SYNs) gets its share of the timeout, not all of it.
#[tokio::test]
async fn a_first_address_that_never_answers_leaves_time_for_the_next() {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let full = socket.listen(0).unwrap();
    let hole = full.local_addr().unwrap();
    let mut queued = Vec::new();
    let mut dropped = false;
    for _ in 0..10 {
        match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(hole)).await {
            Ok(Ok(stream)) => queued.push(stream),
            Ok(Err(e)) => panic!("connecting to the full listener failed: {e}"),
            Err(_) => {
                dropped = true;
                break;
            }
        }
    }
    assert!(dropped, "the listener's queue never filled");
    let good = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    let connected = connect_any(&[hole, good.local_addr().unwrap()], Duration::from_secs(2)).await;
    assert!(connected.is_ok(), "{connected:?}");
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1_800), "took {took:?}");
    // And when every address is silent, the error names the last and the share it had.
    let silent = connect_any(&[hole], Duration::from_millis(300))
        .await
        .unwrap_err();
    let PlainError::Connect(detail) = silent else {
        panic!("{silent:?}")
    };
    assert!(
        detail.contains(&hole.to_string()) && detail.contains("0.3 s"),
        "{detail}"
    );
    drop((queued, full));
}

#[test]
fn targets_are_split_into_authority_and_path() {
    let target = Target::of("http://localhost:11434/v1/chat").unwrap();
    assert_eq!(
        (target.authority, &*target.path),
        ("localhost:11434", "/v1/chat")
    );
    assert_eq!(target.address(), "localhost:11434");
    let target = Target::of("http://example.test").unwrap();
    assert_eq!(
        (&*target.path, &*target.address()),
        ("/", "example.test:80")
    );
    let target = Target::of("http://[::1]/x?q").unwrap();
    assert_eq!((&*target.path, &*target.address()), ("/x?q", "[::1]:80"));
    assert_eq!(
        Target::of("http://[::1]:8080").unwrap().address(),
        "[::1]:8080"
    );
    assert_eq!(&*Target::of("http://h?q=1").unwrap().path, "/?q=1");
    assert_eq!(Target::of("https://h/"), None);
    assert_eq!(Target::of("http:///x"), None);
    assert_eq!(Target::of("http://h/a b"), None);
}

#[test]
fn only_plain_addresses_without_credentials_are_served() {
    assert!(!serves("https://api.openai.com/v1"));
    assert!(!serves("http://user:secret@localhost:11434"));
    assert!(!serves("http://localhost/ä"));
}

#[test]
fn heads_say_how_the_body_ends_and_whether_the_connection_stays() {
    let head = |raw: &[u8]| parse_head(raw).unwrap().unwrap();
    let h = head(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n");
    assert_eq!(
        (h.framing("POST"), h.keep_alive),
        (Framing::Length(3), true)
    );
    let h = head(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n");
    assert!(!h.keep_alive, "HTTP/1.0 closes unless told");
    let h = head(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\ncontent-length: 0\r\n\r\n");
    assert!(h.keep_alive);
    let h =
        head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 9\r\n\r\n");
    assert_eq!(h.framing("POST"), Framing::Chunked(Chunk::Size));
    let h = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");
    assert_eq!(h.framing("POST"), Framing::ToEnd);
    let h = head(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n");
    assert_eq!(h.framing("GET"), Framing::Length(0));
    assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-"), Ok(None));
    assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
    assert!(
        parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").is_err()
    );
}

#[test]
fn chunk_sizes_are_hex_with_optional_extensions() {
    assert_eq!(chunk_size(b"1a"), Ok(26));
    assert_eq!(chunk_size(b"FF ; name=value"), Ok(255));
    assert!(chunk_size(b"zz").is_err());
    assert!(chunk_size(b"").is_err());
}
