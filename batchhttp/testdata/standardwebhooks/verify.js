// Reads {"secret": "...", "deliveries": [{"headers": {...}, "body": "..."}]}
// on stdin and verifies each delivery with the standardwebhooks package, the
// Standard Webhooks reference library. Prints a JSON list: "ok", or
// "refused: <reason>", per delivery.
const { Webhook } = require("standardwebhooks");

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const { secret, deliveries } = JSON.parse(input);
  const wh = new Webhook(secret);
  const results = deliveries.map((d) => {
    try {
      wh.verify(d.body, d.headers);
      return "ok";
    } catch (e) {
      return "refused: " + e.message;
    }
  });
  process.stdout.write(JSON.stringify(results) + "\n");
});
