package bncdeploy;

import java.io.IOException;

/**
 * A model file that cannot be used: missing, not a bnc-deploy model file, corrupt or truncated, written by a
 * newer bnc-deploy, modified after it was written (content hash mismatch), or not a Bayesian network
 * classifier. The message is one line naming the file and the problem.
 */
public class BncFormatException extends IOException {
    private static final long serialVersionUID = 1L;

    public BncFormatException(String message) {
        super(message);
    }

    public BncFormatException(String message, Throwable cause) {
        super(message, cause);
    }
}
