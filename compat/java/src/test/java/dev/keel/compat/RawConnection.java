package dev.keel.compat;

import org.apache.kafka.common.message.ApiVersionsResponseData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.ApiVersionsRequest;
import org.apache.kafka.common.requests.ApiVersionsResponse;
import org.apache.kafka.common.requests.RequestHeader;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;

/**
 * A blocking, single-connection Kafka protocol client built on the request and response
 * classes of kafka-clients. Used for APIs the Admin client no longer exposes (the legacy
 * AlterConfigs request). Negotiates versions with ApiVersions first, like the real clients.
 */
final class RawConnection implements AutoCloseable {
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;
    private int correlationId = 1;
    private ApiVersionsResponseData apiVersions;

    RawConnection(String bootstrap) throws IOException {
        String first = bootstrap.split(",")[0];
        int colon = first.lastIndexOf(':');
        socket = new Socket();
        socket.connect(new InetSocketAddress(first.substring(0, colon), Integer.parseInt(first.substring(colon + 1))),
            10_000);
        socket.setSoTimeout(30_000);
        in = new DataInputStream(socket.getInputStream());
        out = new DataOutputStream(socket.getOutputStream());
        short apiVersionsVersion = ApiKeys.API_VERSIONS.latestVersion();
        ApiVersionsResponse resp = (ApiVersionsResponse) send(new ApiVersionsRequest.Builder().build(apiVersionsVersion));
        if (resp.data().errorCode() != 0) {
            // A broker that does not know our ApiVersions version answers with v0 and its range.
            resp = (ApiVersionsResponse) send(new ApiVersionsRequest.Builder().build((short) 0));
        }
        if (resp.data().errorCode() != 0) {
            throw new IOException("ApiVersions failed with error code " + resp.data().errorCode());
        }
        apiVersions = resp.data();
    }

    /** The highest version both this client and the broker support, or -1 if none. */
    short negotiatedVersion(ApiKeys key) {
        ApiVersionsResponseData.ApiVersion v = apiVersions.apiKeys().find(key.id);
        if (v == null) {
            return -1;
        }
        short max = (short) Math.min(v.maxVersion(), key.latestVersion());
        short min = (short) Math.max(v.minVersion(), key.oldestVersion());
        return max >= min ? max : -1;
    }

    AbstractResponse send(AbstractRequest request) throws IOException {
        RequestHeader header = new RequestHeader(request.apiKey(), request.version(), "keel-compat-raw",
            correlationId++);
        ByteBuffer buf = request.serializeWithHeader(header);
        out.writeInt(buf.remaining());
        out.write(buf.array(), buf.arrayOffset() + buf.position(), buf.remaining());
        out.flush();
        int size = in.readInt();
        if (size < 0 || size > 64 * 1024 * 1024) {
            throw new IOException("bad response size " + size);
        }
        byte[] body = new byte[size];
        in.readFully(body);
        return AbstractResponse.parseResponse(ByteBuffer.wrap(body), header);
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
